"""State snapshots: an LRU of KV-cache prefixes kept in reserved sequences of the worker's
llama.cpp context, so that a state that keeps coming back is not read again for every request.

A request's prefix (preamble + state) is matched against every kept prefix by longest common
prefix over token ids; a hit copies the matched cells into the request's working sequence (with
a unified KV cache only cell metadata changes) and only the tokens after the match are read. The
profile's preamble is pinned, so every prompt hits at least that. Limits: `max_entries` prefixes
and `max_tokens` tokens; 0 entries turns the cache off. Kept cells slow every later read (1.26x
at 6,000 cells, `make bench-decode`), so a prefix is kept on its second miss among the last
`max_entries` misses, one unused for STALE_USES x `max_entries` lookups is evicted, and evicted
or unkept prefixes go to host memory (worker/spill.py), from where a whole match is restored.

Invariant: every sequence's cells are in position order. Flash attention sums a sequence's cells
in cell order (fp16), so out-of-order cells change answers (a margin of 1.04 became 0.88), and
llama.cpp places tokens first-fit from the lowest free cell: after an eviction frees cells below a
kept prefix, tokens appended to a copy of it would land below it. So each entry remembers the
`epoch` it was placed in, every eviction starts a new epoch, and before a batch extends an entry
from an older epoch the entries it uses are relocated: saved, removed and restored first-fit (a
memcpy), as entries from host memory come in. The pinned preamble is read first and never moves;
the others are saved without it and share its cells again (worker/snapshot_moves.py); a partial
match needs its sliding window (Gemma 3), which a long one may lose (_window_ok).
"""
from __future__ import annotations

from typing import Any, Sequence

import msgspec

from shared.messages import SnapshotStats, prefix_key
from shared.recent import RecentKeys
from worker.snapshot_moves import CellMover
from worker.snapshot_parts import Entry, Plan, SeqBackend, best_match
from worker.spill import SpillStore

MIN_TOKENS = 32  # shorter prefixes are not worth a sequence
STALE_USES = 4  # a snapshot unused for this many times max_entries lookups is evicted


class SnapshotCache:
    def __init__(self, backend: SeqBackend, *, seqs: Sequence[int], max_entries: int, max_tokens: int,
                 min_tokens: int = MIN_TOKENS, n_swa: int = 0, second_miss: bool = True,
                 spill_bytes: int = 0) -> None:
        self.backend = backend
        self.moves = CellMover(backend)  # saves and restores, sharing the pinned preamble's cells
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
        self.spill = SpillStore(spill_bytes if self.enabled else 0)

    @property
    def enabled(self) -> bool:
        return self.max_entries > 0 and self.max_tokens >= self.min_tokens

    @property
    def entries(self) -> list[Entry]:
        return list(self._entries)

    def held_keys(self) -> frozenset[str]:
        """Keys of every prefix kept, in cells or in host memory (heartbeats carry them)."""
        return frozenset(self.keys + self.spill.keys)

    def stats(self) -> SnapshotStats:
        """The counters with the cache's present size filled in (a copy: heartbeats carry it)."""
        return msgspec.structs.replace(self.counters, kept=len(self._entries), max=self.max_entries,
                                       tokens=self.tokens, max_tokens=self.max_tokens,
                                       bytes=self.tokens * self.token_bytes, **self.spill.figures())

    # --- lookups (no side effects) ----------------------------------------------------------
    def _window_ok(self, entry: Entry, n: int) -> bool:
        """Can a copy of entry's first n tokens be extended (a partial match needs the window before n)?"""
        return (n >= len(entry.tokens) or self.n_swa <= 0
                or max(self.backend.pos_min(entry.seq), entry.window_from) <= max(0, n - self.n_swa + 1))

    def _match(self, prefix: Sequence[int], entries: list[Entry]) -> tuple[Entry | None, int]:
        return best_match(prefix, entries, min_tokens=self.min_tokens, epoch=self.epoch, usable=self._window_ok)

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
        plan = Plan(prefixes, [prefix_key(p) for p in prefixes], work, reused=[0] * len(prefixes), warm=warm)
        for e in [e for e in self._entries if not e.pinned and self._clock - e.used > STALE_USES * self.max_entries]:
            self._evict(e)
        first: dict[tuple[int, ...], int] = {}  # exact tokens, not keys: a key is a 64-bit hash
        matches: dict[int, tuple[Entry | None, int]] = {}
        for j, prefix in enumerate(prefixes):
            key = tuple(prefix)
            if prefix and key in first:  # same state twice in one batch: read it once
                plan.copies.append((work[first[key]], work[j], len(prefix)))
                plan.reused[j] = len(prefix)
                continue
            first[key] = j
            matches[j] = self._match(prefix, self._entries) if self.enabled else (None, 0)
        blobs = self._unspill(plan, matches) if not warm and self.spill.enabled else {}
        used = {id(e): e for e, _ in matches.values() if e is not None}
        movers = [e for e in used.values() if not e.pinned]
        if any(e.placed != self.epoch for e in movers):
            self._relocate(movers, blobs)
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
            if n == length or length < self.min_tokens:
                continue  # a hit, or too short
            if not self._seen_before(plan.keys[j]) or slots < 1 or length > room:
                plan.spill.append(j)  # not (yet) worth cells, or no room
                continue
            plan.admit.append(j)
            slots -= 1
            room -= length

    def _seen_before(self, key: str) -> bool:
        """Note a miss of a prefix: may it be kept (missed before, among the last max_entries)?"""
        again = key in self._missed or not self.second_miss
        self._missed.touch(key)
        return again

    def end(self, plan: Plan) -> None:
        """Keep the admitted prefixes (copied from their working sequences, which the engine
        removes afterwards), evicting least recently used entries to make room; save the other
        misses to host memory."""
        if plan.warm:
            return
        for j in plan.spill:
            self.spill.put(plan.keys[j], plan.prefixes[j], lambda: self.moves.save(plan.work[j], plan.prefixes[j]))
        placed = self.epoch  # an eviction below makes the new entries movable too
        self._make_room(len(plan.admit), sum(len(plan.prefixes[j]) for j in plan.admit), plan.protect)
        for j in plan.admit:
            prefix = plan.prefixes[j]
            seq = self._free.pop()
            self.backend.copy(plan.work[j], seq, len(prefix))
            self._clock += 1
            self._add(Entry(tokens=list(prefix), seq=seq, key=plan.keys[j], used=self._clock, placed=placed))

    def _make_room(self, entries: int, tokens: int, protect: set[int]) -> bool:
        """Evict least recently used entries (not pinned, not in `protect`) until `entries` more
        entries of `tokens` tokens in all fit; False if they cannot."""
        while len(self._entries) + entries > self.max_entries or self.tokens + tokens > self.max_tokens:
            victims = [e for e in self._entries if not e.pinned and id(e) not in protect]
            if not victims:
                return False
            self._evict(min(victims, key=lambda e: e.used))
        return True

    def _unspill(self, plan: Plan, matches: dict[int, tuple[Entry | None, int]]) -> dict[int, Any]:
        """Turn every prefix that no entry holds whole but host memory does into an entry (its
        cells restored by _relocate) and match it; the blobs by id(entry)."""
        blobs: dict[int, Any] = {}
        for j, (_, n) in matches.items():
            prefix, key = plan.prefixes[j], plan.keys[j]
            blob = self.spill.take(key, prefix) if n < len(prefix) else None  # held even if room drops it
            if blob is None or not self._make_room(1, len(prefix), {id(e) for e, _ in matches.values() if e}):
                continue
            self.counters.ram_hits += 1
            entry = Entry(tokens=list(prefix), seq=self._free.pop(), key=key, placed=self.epoch - 1)
            self._add(entry)
            blobs[id(entry)] = blob
            matches[j] = (entry, len(prefix))
        return blobs

    def pin(self, tokens: list[int], work_seq: int) -> None:
        """Keep `tokens` (already read into work_seq) for good. Call on an empty cache, before
        anything else is read, so its cells are the lowest."""
        if not self.enabled or len(tokens) < self.min_tokens or len(tokens) > self.max_tokens:
            return
        if self._entries:
            raise RuntimeError("the preamble must be pinned first")
        seq = self._free.pop()
        self.backend.copy(work_seq, seq, len(tokens))
        preamble = Entry(tokens=list(tokens), seq=seq, key=prefix_key(tokens), pinned=True, placed=self.epoch)
        self.moves.preamble = preamble
        self._add(preamble)

    def clear(self) -> None:
        """Forget every snapshot but the pinned preamble, and host memory's (tests start afresh)."""
        self.spill.clear()
        for e in [e for e in self._entries if not e.pinned]:
            self._forget(e)  # not _evict: nothing to save
        self.epoch += 1
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
        """Save to host memory and forget; forgotten also if the save raises (it may have taken
        the preamble's positions out already)."""
        try:
            self.spill.put(entry.key, entry.tokens, lambda: self.moves.save(entry.seq, entry.tokens))
        finally:
            self._forget(entry)
            self.epoch += 1  # its cells are free now, maybe below other entries

    def _relocate(self, movers: list[Entry], blobs: dict[int, Any]) -> None:
        """Move `movers` back into cell order (CellMover.relocate; entries from host memory have
        their blobs in `blobs`). This starts no new epoch: an entry in place had no free cell
        below it, so the only free cells below it now are the movers' own, the lowest, which the
        restore fills first. (A new epoch here made every entry a mover in turn, each batch
        relocating them all again.)"""
        if any(id(e) not in blobs for e in movers):
            self.counters.relocations += 1
        try:
            self.moves.relocate(movers, blobs, self.epoch)
        finally:
            lost = [e for e in movers if e.placed != self.epoch]
            if lost:  # a failed save or restore loses the rest, never serves them half,
                self.epoch += 1  # and their cells stay free, maybe below entries in place
            for e in lost:
                self._forget(e)

