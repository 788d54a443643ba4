"""State snapshots: an LRU of KV-cache prefixes kept in reserved sequences of the worker's
llama.cpp context, so that a state that keeps coming back is not read again for every request.

A request's prefix (preamble + state) is matched against every kept prefix by longest common
prefix over token ids. A hit copies the matched cells into the request's working sequence
(llama_memory_seq_cp: with a unified KV cache only cell metadata changes) and only the tokens
after the match are read. The profile's preamble is pinned, so every real prompt hits at least
that. Limits: `max_entries` prefixes and `max_tokens` tokens in all (the sum of their lengths,
an upper bound of the cells they hold); 0 entries turns the cache off.
Kept cells slow every later read (llama.cpp attends over the whole range of used cells: a
48-token read above 6,000 cells of other sequences took 1.25-1.39x as long, `make bench-decode`),
so a prefix is kept on its second miss among the last `max_entries` misses (`second_miss`), and
one unused for STALE_USES x `max_entries` lookups is evicted even when there is room.

Why cells must stay in position order: flash attention accumulates over a sequence's KV cells
in cell order (in fp16), so a sequence whose cells are out of position order gets a different
answer than a fresh read of the same prompt (measured: a yes-no margin of 1.04 became 0.88).
llama.cpp puts new tokens first-fit from the lowest free cell, so after an eviction frees cells
below a kept prefix, tokens appended to a copy of that prefix would land below it. Each kept
prefix therefore remembers the `epoch` it was placed in; every eviction starts a new epoch, and
before a copy of a prefix from an older epoch is extended, the prefixes used by the batch are
relocated: saved, removed and restored (a memcpy of their cells, about 1.5 ms per 250 tokens).
Restoring is first-fit too, so afterwards no free cell lies below them and new tokens land
above; and entries that were in place stay in place (see _relocate), so a relocation starts no
new epoch. The pinned preamble is read first into an empty cache and never moves.

Sliding-window layers (Gemma 3): llama.cpp may drop cells out of a kept prefix's window (a saved
state omits them), so a partial match (an LCP shorter than the kept prefix) is used only while
the window before the match point is present.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, Sequence

import msgspec

from shared.messages import SnapshotStats, common_prefix, prefix_key
from shared.recent import RecentKeys

MIN_TOKENS = 32  # shorter prefixes are not worth a sequence
STALE_USES = 4  # a snapshot unused for this many times max_entries lookups is evicted


class SeqBackend(Protocol):
    """The cell operations the cache needs from the context (worker.engine.Engine)."""

    def copy(self, src: int, dst: int, length: int) -> None: ...
    def remove(self, seq: int) -> None: ...
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


@dataclass
class Plan:
    """What one batch does with the cache: filled by begin(), done by the engine, closed by end()."""

    prefixes: list[list[int]]
    work: list[int]  # the working sequence of each job
    reads: list[tuple[int, int, list[int]]] = field(default_factory=list)  # (seq, start, tokens)
    copies: list[tuple[int, int, int]] = field(default_factory=list)  # after the reads: (src, dst, n)
    reused: list[int] = field(default_factory=list)  # prefix tokens each job did not read
    admit: list[int] = field(default_factory=list)  # jobs whose prefix becomes a snapshot
    protect: set[int] = field(default_factory=set)  # ids of entries this batch used
    warm: bool = False


class SnapshotCache:
    def __init__(self, backend: SeqBackend, *, seqs: Sequence[int], max_entries: int, max_tokens: int,
                 min_tokens: int = MIN_TOKENS, n_swa: int = 0, second_miss: bool = True) -> None:
        self.backend = backend
        self.max_entries = max(0, min(max_entries, len(seqs)))
        self.max_tokens = max(0, max_tokens)
        self.min_tokens = min_tokens
        self.n_swa = n_swa  # sliding window of the model's SWA layers (0: none)
        self.token_bytes = 0  # KV bytes per kept token, measured when the preamble is pinned
        self.counters = SnapshotStats()  # its hits, misses, reused_tokens and relocations count here
        self.epoch = 0
        self.tokens = 0
        self.keys: tuple[str, ...] = ()  # replaced whole, so other threads may read it
        self._entries: list[Entry] = []
        self.second_miss = second_miss
        self._missed = RecentKeys(self.max_entries)  # keys of the last max_entries misses
        self._free = list(reversed(seqs))
        self._clock = 0

    @property
    def enabled(self) -> bool:
        return self.max_entries > 0 and self.max_tokens >= self.min_tokens

    @property
    def entries(self) -> list[Entry]:
        return list(self._entries)

    def stats(self) -> SnapshotStats:
        """The counters with the cache's present size filled in (a copy: heartbeats carry it)."""
        return msgspec.structs.replace(self.counters, kept=len(self._entries), max=self.max_entries,
                                       tokens=self.tokens, max_tokens=self.max_tokens,
                                       bytes=self.tokens * self.token_bytes)

    # --- lookups (no side effects) ----------------------------------------------------------
    def _window_ok(self, entry: Entry, n: int) -> bool:
        """Can a copy of entry's first n tokens be extended? A partial match needs the
        sliding window before position n, which llama.cpp may have dropped."""
        if n >= len(entry.tokens) or self.n_swa <= 0:
            return True
        return self.backend.pos_min(entry.seq) <= max(0, n - self.n_swa + 1)

    def _match(self, prefix: Sequence[int], entries: list[Entry]) -> tuple[Entry | None, int]:
        """The entry to start from and how many tokens of it. Beyond the pinned preamble, a
        state snapshot must give min_tokens more (or all of its own, if it holds fewer): a few
        shared words ("The ...") are not worth touching, or moving, a snapshot."""
        pinned = [e for e in entries if e.pinned]
        floor = max((common_prefix(prefix, e.tokens) for e in pinned), default=0)
        best: Entry | None = None
        best_rank: tuple = (0,)
        for e in entries:
            n = common_prefix(prefix, e.tokens)
            need = self.min_tokens if e.pinned else floor + min(self.min_tokens, len(e.tokens) - floor)
            if n < need or n < best_rank[0] or not self._window_ok(e, n):
                continue
            # longest; then the preamble, then one that need not move, then the most recent
            rank = (n, e.pinned, e.placed == self.epoch, e.used)
            if rank > best_rank:
                best, best_rank = e, rank
        return best, (best_rank[0] if best else 0)

    def estimate(self, prefix: Sequence[int], earlier: Sequence[Sequence[int]] = ()) -> int:
        """Prefix tokens a request would read if it joined a batch holding `earlier`."""
        if prefix and any(p == prefix for p in earlier):
            return 0
        if not self.enabled:
            return len(prefix)
        return len(prefix) - self._match(prefix, self._entries)[1]

    # --- one batch --------------------------------------------------------------------------
    def begin(self, prefixes: list[list[int]], work: list[int], *, warm: bool = False) -> Plan:
        """Match every prefix, move kept prefixes back into order if needed, copy the matches
        into the working sequences and list what is left to read. A warm batch (warmup) is
        neither counted nor kept."""
        plan = Plan(prefixes=prefixes, work=work, reused=[0] * len(prefixes), warm=warm)
        for e in [e for e in self._entries if not e.pinned and self._clock - e.used > STALE_USES * self.max_entries]:
            self._evict(e)
        first: dict[tuple[int, ...], int] = {}
        matches: dict[int, tuple[Entry | None, int]] = {}
        for j, prefix in enumerate(prefixes):
            key = tuple(prefix)
            if prefix and key in first:  # same state twice in one batch: read it once
                plan.copies.append((work[first[key]], work[j], len(prefix)))
                plan.reused[j] = len(prefix)
                continue
            first[key] = j
            matches[j] = self._match(prefix, self._entries) if self.enabled else (None, 0)
        used = {id(e): e for e, _ in matches.values() if e is not None}
        movers = [e for e in used.values() if not e.pinned]
        if any(e.placed != self.epoch for e in movers):
            self._relocate(movers)
            in_place = [e for e in self._entries if e.pinned or e.placed == self.epoch]
            for j, (e, n) in matches.items():  # a move may drop a partial match's window
                if e is not None and not self._window_ok(e, n):
                    matches[j] = self._match(prefixes[j], in_place)
            used = {id(e): e for e, _ in matches.values() if e is not None}
        plan.protect = set(used)
        if not warm and self.enabled:
            self._plan_admissions(plan, matches)
            for j, (e, n) in matches.items():
                self._clock += 1  # counts lookups: LRU order and staleness
                if e is not None:
                    e.used = self._clock
                if e is not None and not e.pinned:
                    self.counters.hits += 1
                else:
                    self.counters.misses += 1
                self.counters.reused_tokens += n
        # Prefixes that will be kept are read first: the cells freed at the end of the batch
        # then lie above every kept cell, and no hole is left below a snapshot.
        admitted = set(plan.admit)
        order = [j for j in matches if j in admitted] + [j for j in matches if j not in admitted]
        for j in order:
            e, n = matches[j]
            if e is not None:
                self.backend.copy(e.seq, work[j], n)
            plan.reused[j] = n
            if len(prefixes[j]) > n:
                plan.reads.append((work[j], n, prefixes[j][n:]))
        return plan

    def _plan_admissions(self, plan: Plan, matches: dict[int, tuple[Entry | None, int]]) -> None:
        """Which new prefixes end() will keep, decided before reading (see begin). Every entry
        this batch does not use may be evicted to make room."""
        keep = [e for e in self._entries if e.pinned or id(e) in plan.protect]
        slots = self.max_entries - len(keep)
        room = self.max_tokens - sum(len(e.tokens) for e in keep)
        for j, (_, n) in matches.items():
            length = len(plan.prefixes[j])
            if n == length or length < self.min_tokens or not self._seen_before(plan.prefixes[j]):
                continue  # a hit, too short, or not (yet) worth keeping
            if slots < 1 or length > room:
                continue
            plan.admit.append(j)
            slots -= 1
            room -= length

    def _seen_before(self, prefix: list[int]) -> bool:
        """Note a miss of prefix: may it be kept (missed before, among the last max_entries)?"""
        key = prefix_key(prefix)
        again = key in self._missed or not self.second_miss
        self._missed.touch(key)
        return again

    def end(self, plan: Plan) -> None:
        """Keep the admitted prefixes (copied from their working sequences, which the engine
        removes afterwards), evicting least recently used entries to make room."""
        if plan.warm or not plan.admit:
            return
        placed = self.epoch  # an eviction below makes the new entries movable too
        need_tokens = sum(len(plan.prefixes[j]) for j in plan.admit)
        while (len(self._entries) + len(plan.admit) > self.max_entries
               or self.tokens + need_tokens > self.max_tokens):
            victims = [e for e in self._entries if not e.pinned and id(e) not in plan.protect]
            self._evict(min(victims, key=lambda e: e.used))
        for j in plan.admit:
            prefix = plan.prefixes[j]
            seq = self._free.pop()
            self.backend.copy(plan.work[j], seq, len(prefix))
            self._clock += 1
            self._add(Entry(tokens=list(prefix), seq=seq, key=prefix_key(prefix), used=self._clock, placed=placed))

    def pin(self, tokens: list[int], work_seq: int) -> None:
        """Keep `tokens` (already read into work_seq) for good. Call on an empty cache, before
        anything else is read, so its cells are the lowest."""
        if not self.enabled or len(tokens) < self.min_tokens or len(tokens) > self.max_tokens:
            return
        if self._entries:
            raise RuntimeError("the preamble must be pinned first")
        seq = self._free.pop()
        self.backend.copy(work_seq, seq, len(tokens))
        self._add(Entry(tokens=list(tokens), seq=seq, key=prefix_key(tokens), pinned=True, placed=self.epoch))

    def clear(self) -> None:
        """Forget every snapshot but the pinned preamble."""
        for e in [e for e in self._entries if not e.pinned]:
            self._evict(e)
        self._missed.clear()

    def lost_placement(self) -> None:
        """After a failed batch nothing is known about free cells: move before the next use."""
        self.epoch += 1

    # --- bookkeeping ------------------------------------------------------------------------
    def _add(self, entry: Entry) -> None:
        self._entries.append(entry)
        self.tokens += len(entry.tokens)
        self.keys = tuple(e.key for e in self._entries)

    def _forget(self, entry: Entry) -> None:
        self.backend.remove(entry.seq)
        self._entries.remove(entry)
        self._free.append(entry.seq)
        self.tokens -= len(entry.tokens)
        self.keys = tuple(e.key for e in self._entries)

    def _evict(self, entry: Entry) -> None:
        self._forget(entry)
        self.epoch += 1  # its cells are free now, maybe below other entries

    def _relocate(self, movers: list[Entry]) -> None:
        """Save every mover, remove them all, restore them: they land first-fit, in order. This
        starts no new epoch: an entry in place had no free cell below it, so the only free cells
        below it now are the movers' own, the lowest, which the restore fills first. (A new epoch
        here made every entry a mover in turn, each batch relocating them all again.)"""
        blobs = [self.backend.save(e.seq) for e in movers]
        for e in movers:
            self.backend.remove(e.seq)
        self.counters.relocations += 1
        done = 0
        try:
            for e, blob in zip(movers, blobs):
                self.backend.restore(e.seq, blob)
                e.placed = self.epoch
                done += 1
        finally:
            if done < len(movers):  # a failed restore loses the rest, never serves them half,
                self.epoch += 1  # and their cells stay free, maybe below entries in place
            for e in movers[done:]:
                self._forget(e)

