"""The parts of the snapshot cache (worker/snapshots.py): the cell operations it needs, one kept
prefix, one batch's plan, and which kept prefix a request starts from."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Protocol, Sequence

from shared.messages import common_prefix


class SeqBackend(Protocol):
    """The cell operations the cache needs from the context (worker.engine.Engine)."""

    def copy(self, src: int, dst: int, length: int) -> None: ...
    def remove(self, seq: int, p0: int = -1, p1: int = -1) -> None: ...  # positions [p0, p1); -1: open
    def save(self, seq: int) -> Any: ...
    def restore(self, seq: int, blob: Any) -> None: ...
    def pos_min(self, seq: int) -> int: ...


@dataclass
class Entry:
    tokens: list[int]
    seq: int
    key: str
    pinned: bool = False
    used: int = 0  # LRU clock value of the last use
    placed: int = 0  # epoch in which its cells were placed
    window_from: int = 0  # after a restore: sliding-window cells beyond the preamble start here


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
    protect: set[int] = field(default_factory=set)  # ids of entries this batch used
    warm: bool = False


def best_match(prefix: Sequence[int], entries: list[Entry], *, min_tokens: int, epoch: int,
               usable: Callable[[Entry, int], bool]) -> tuple[Entry | None, int]:
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
        rank = (n, e.pinned, e.placed == epoch, e.used)
        if rank > best_rank:
            best, best_rank = e, rank
    return best, (best_rank[0] if best else 0)
