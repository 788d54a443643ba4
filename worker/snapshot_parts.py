"""The parts of the snapshot cache (worker/snapshots.py): the cell operations it needs, where a
kept prefix's cells are, one kept prefix, one batch's plan, and which kept prefix a request
starts from."""
from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Callable, Protocol, Sequence

from shared.messages import common_prefix


class SeqBackend(Protocol):
    """The cell operations the cache needs from the context (worker.engine.Engine)."""

    def copy(self, src: int, dst: int, length: int) -> None: ...
    def remove(self, seq: int, p0: int = -1, p1: int = -1) -> None: ...  # positions [p0, p1); -1: open
    def save(self, seq: int) -> Any: ...
    def restore(self, seq: int, blob: Any) -> None: ...
    def pos_min(self, seq: int) -> int: ...


class Placement(Enum):
    """Where a kept prefix's cells are, and so what must happen before a batch extends it.
    Only the cache (worker/snapshots.py) changes an entry's placement."""

    IN_CELLS = "in cells"  # in the context, no cell below its own freed since: usable as it is
    MOVABLE = "movable"  # in the context, but a cell below may have been freed since: move it first
    IN_HOST = "in host memory"  # only its blob holds its cells (within one begin()): restore it first
    NOWHERE = "nowhere"  # forgotten: its sequence is free again, its tokens are no longer held


@dataclass(eq=False)  # an entry is compared and hashed by identity: two may hold equal tokens for a moment
class Entry:
    tokens: list[int]
    seq: int
    key: str
    state: Placement
    pinned: bool = False  # the preamble: read first, its cells the lowest; always IN_CELLS
    used: int = 0  # LRU clock value of the last use
    blob: Any = None  # while IN_HOST: its saved cells beyond the preamble (worker/snapshot_moves.py)
    window_from: int = 0  # after a restore: sliding-window cells beyond the preamble start here


Match = tuple[Entry | None, int]  # the entry a prefix starts from (None: read it all) and its tokens used


@dataclass
class Plan:
    """What one batch does with the cache: filled by begin(), done by the engine, closed by end()."""

    prefixes: list[list[int]]
    keys: list[str]  # prefix_key of each prefix, computed once
    work: list[int]  # the working sequence of each job
    reads: list[tuple[int, int, list[int]]] = field(default_factory=list)  # (seq, start, tokens)
    copies: list[tuple[int, int, int]] = field(default_factory=list)  # after the reads: (src, dst, n)
    reused: list[int] = field(default_factory=list)  # prefix tokens each job did not read
    admit: list[int] = field(default_factory=list)  # jobs whose prefix becomes a snapshot
    spill: list[int] = field(default_factory=list)  # jobs whose missed prefix goes to host memory
    protect: set[Entry] = field(default_factory=set)  # the entries this batch uses: end() keeps them
    windows: dict[int, int] = field(default_factory=dict)  # working seq -> Entry.window_from, if read with a gap
    warm: bool = False

    def share_duplicates(self) -> list[int]:
        """The jobs whose prefix comes first in the batch; each later job with the same prefix
        (exact tokens, not keys: a key is a 64-bit hash) is read once, copied from that batch
        mate after the reads (its copy and its reused tokens are set here)."""
        first: dict[tuple[int, ...], int] = {}
        distinct: list[int] = []
        for j, prefix in enumerate(self.prefixes):
            if prefix and tuple(prefix) in first:
                self.copies.append((self.work[first[tuple(prefix)]], self.work[j], len(prefix)))
                self.reused[j] = len(prefix)
            else:
                first[tuple(prefix)] = j
                distinct.append(j)
        return distinct

    def start_from(self, matches: dict[int, Match], copy: Callable[[int, int, int], None]) -> None:
        """Copy each job's match into its working sequence (copy(src, dst, tokens)) and list what
        is left to read. Prefixes that will be kept are read first: the cells freed at the end of
        the batch then lie above every kept cell, and no hole is left below a snapshot."""
        admitted = set(self.admit)
        for j in [j for j in matches if j in admitted] + [j for j in matches if j not in admitted]:
            e, n = matches[j]
            if e is not None:
                copy(e.seq, self.work[j], n)
            self.reused[j] = n
            if len(self.prefixes[j]) > n:
                self.reads.append((self.work[j], n, self.prefixes[j][n:]))


def best_match(prefix: Sequence[int], entries: list[Entry], *, min_tokens: int,
               usable: Callable[[Entry, int], bool]) -> Match:
    """The entry to start from and how many tokens of it. Beyond the pinned preamble, a state
    snapshot must give min_tokens more (or all of its own, if it holds fewer): a few shared words
    ("The ...") are not worth touching, or moving, a snapshot. usable(entry, n): can a copy of
    its first n tokens be extended (the sliding window)."""
    pinned = [e for e in entries if e.pinned]
    floor = max((common_prefix(prefix, e.tokens) for e in pinned), default=0)
    best: Entry | None = None
    best_rank: tuple = (0,)
    for e in entries:
        n = common_prefix(prefix, e.tokens)
        need = min_tokens if e.pinned else floor + min(min_tokens, len(e.tokens) - floor)
        if n < need or n < best_rank[0] or not usable(e, n):
            continue
        # longest; then the preamble, then one that need not move, then the most recent
        rank = (n, e.pinned, e.state is Placement.IN_CELLS, e.used)
        if rank > best_rank:
            best, best_rank = e, rank
    return best, (best_rank[0] if best else 0)


def used_entries(matches: dict[int, Match]) -> list[Entry]:
    """The distinct entries among `matches`, in the order of their first match."""
    return list(dict.fromkeys(e for e, _ in matches.values() if e is not None))


def lru_victims(entries: list[Entry], more: int, tokens: int, protect: set[Entry], *, max_entries: int,
                max_tokens: int) -> list[Entry] | None:
    """Which of `entries` must be evicted, least recently used first (never the pinned preamble
    or one in `protect`), for `more` entries of `tokens` tokens in all to fit the limits; None
    if evicting every candidate would not make room (then nobody need go)."""
    count, held, victims = len(entries) + more, sum(len(e.tokens) for e in entries) + tokens, []
    for e in sorted((e for e in entries if not e.pinned and e not in protect), key=lambda e: e.used):
        if count <= max_entries and held <= max_tokens:
            break
        victims.append(e)
        count, held = count - 1, held - len(e.tokens)
    return victims if count <= max_entries and held <= max_tokens else None
