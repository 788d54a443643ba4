"""State snapshots: an LRU of KV-cache prefixes kept in reserved sequences of the worker's
llama.cpp context, so that a state that keeps coming back is not read again for every request.

A request's prefix (preamble + state) is matched against every kept prefix by longest common prefix
over token ids; a hit copies the matched cells into the request's working sequence (with a unified
KV cache only cell metadata changes) and only the tokens after the match are read. The profile's
preamble is pinned, so every prompt hits at least that. Limits: `max_entries` prefixes and
`max_tokens` tokens; 0 entries turns the cache off. Kept cells slow every later read (1.26x at
6,000 cells, bench/decode_cost.py at 4a17b4c), so a prefix is kept on its second miss among the
last `max_entries` misses, one unused for STALE_USES x `max_entries` lookups is evicted, and
evicted or unkept prefixes go to host memory (worker/spill.py), from where a whole match is
restored.

Invariant: every sequence's cells are in position order. Flash attention sums a sequence's cells
in cell order (fp16), so out-of-order cells change answers (a margin of 1.04 became 0.88), and
llama.cpp places tokens first-fit from the lowest free cell: after an eviction frees cells below a
kept prefix, tokens appended to a copy of it would land below it. So each entry has a placement
(snapshot_parts.Placement), which only this module changes: IN_CELLS while no cell below its own
was freed since it was placed; every eviction (or failed batch) makes the others MOVABLE; before
a batch extends a MOVABLE entry, the entries it uses are relocated: saved, removed and restored
first-fit (a memcpy), as entries coming IN_HOST from host memory are. A batch only ever starts
from entries IN_CELLS. The pinned preamble is read first and never moves; the others are saved
without it and share its cells again (worker/snapshot_moves.py); a partial match needs its
sliding window (Gemma 3), which a long one may lose (_window_ok).
"""
from __future__ import annotations

from typing import Sequence

import msgspec

from shared.messages import SnapshotStats, prefix_key
from shared.recent import RecentKeys
from worker.snapshot_moves import CellMover
from worker.snapshot_parts import Entry, Match, Placement, Plan, SeqBackend, best_match, lru_victims, used_entries
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

    def _match(self, prefix: Sequence[int], entries: list[Entry]) -> Match:
        return best_match(prefix, entries, min_tokens=self.min_tokens, usable=self._window_ok)

    def estimate(self, prefix: Sequence[int], earlier: Sequence[Sequence[int]] = ()) -> int:
        """Prefix tokens a request would read if it joined a batch holding `earlier`."""
        if prefix and any(p == prefix for p in earlier):
            return 0
        if not self.enabled:
            return len(prefix)
        return len(prefix) - self._match(prefix, self._entries)[1]

    # --- one batch --------------------------------------------------------------------------
    def begin(self, prefixes: list[list[int]], work: list[int], *, warm: bool = False) -> Plan:
        """Plan one batch and copy its matches into the working sequences, in steps 1-6, each
        with its contract. A warm batch (warmup) is neither counted nor kept, nor brings
        anything from host memory."""
        assert all(e.state is not Placement.IN_HOST for e in self._entries), "an entry left in host memory"
        plan = Plan(prefixes, [prefix_key(p) for p in prefixes], work, reused=[0] * len(prefixes), warm=warm)
        for e in [e for e in self._entries if not e.pinned and self._clock - e.used > STALE_USES * self.max_entries]:
            self._evict(e)  # 0: unused for long, it slows every read
        # 1: the best entry for each distinct prefix (a duplicate is copied from its batch mate)
        matches = {j: self._match(prefixes[j], self._entries) if self.enabled else (None, 0)
                   for j in plan.share_duplicates()}
        if not warm and self.spill.enabled:
            matches = self._unspill(plan, matches)
        matches = self._put_in_place(plan, matches)
        plan.protect = set(used_entries(matches))
        if not warm and self.enabled:
            self._plan_admissions(plan, matches)
            self._count(matches)
        plan.start_from(matches, self.backend.copy)  # 6: the matched cells in, what is left to read
        return plan

    def _unspill(self, plan: Plan, matches: dict[int, Match]) -> dict[int, Match]:
        """Step 2: each prefix that no entry holds whole but host memory does becomes a new entry,
        IN_HOST with its blob, matched whole, if room can be made without evicting an entry
        this batch matched. Returns the matches with those in; if a save while making room
        raises, the entries it added are forgotten, so none is left IN_HOST."""
        out = dict(matches)
        added: list[Entry] = []
        try:
            for j, (_, n) in matches.items():
                prefix, key = plan.prefixes[j], plan.keys[j]
                blob = self.spill.take(key, prefix) if n < len(prefix) else None  # held even if room drops it
                if blob is None or not self._make_room(1, len(prefix), set(used_entries(out))):
                    continue
                self.counters.ram_hits += 1
                entry = Entry(tokens=list(prefix), seq=self._free.pop(), key=key, state=Placement.IN_HOST, blob=blob)
                self._add(entry)
                added.append(entry)
                out[j] = (entry, len(prefix))
        except BaseException:
            for e in added:
                self._forget(e)
            raise
        return out

    def _put_in_place(self, plan: Plan, matches: dict[int, Match]) -> dict[int, Match]:
        """Step 3: if an entry the batch uses is not IN_CELLS, relocate every entry it uses but
        the preamble (_relocate); a move may drop a partial match's sliding window, so those
        are matched again among the entries in place. On return every matched entry is IN_CELLS."""
        movers = [e for e in used_entries(matches) if not e.pinned]
        if any(e.state is not Placement.IN_CELLS for e in movers):
            self._relocate(movers)
            in_place = [e for e in self._entries if e.state is Placement.IN_CELLS]
            matches = {j: (e, n) if e is None or self._window_ok(e, n) else self._match(plan.prefixes[j], in_place)
                       for j, (e, n) in matches.items()}
        assert all(e.state is Placement.IN_CELLS for e in used_entries(matches)), "a match out of place"
        return matches

    def _plan_admissions(self, plan: Plan, matches: dict[int, Match]) -> None:
        """Step 4: which new prefixes end() will keep, decided before reading (Plan.start_from
        says why). Every entry this batch does not use may be evicted to make room, so
        end() always can; the other misses of min_tokens or more go to host memory."""
        keep = [e for e in self._entries if e.pinned or e in plan.protect]
        slots = self.max_entries - len(keep)
        room = self.max_tokens - sum(len(e.tokens) for e in keep)
        for j, (_, n) in matches.items():
            length = len(plan.prefixes[j])
            if n == length or length < self.min_tokens:
                continue  # a hit, or too short
            seen = plan.keys[j] in self._missed or not self.second_miss  # missed among the last max_entries
            self._missed.touch(plan.keys[j])
            if not seen or slots < 1 or length > room:
                plan.spill.append(j)  # not (yet) worth cells, or no room
                continue
            plan.admit.append(j)
            slots -= 1
            room -= length

    def _count(self, matches: dict[int, Match]) -> None:
        """Step 5: one lookup per distinct prefix on the LRU clock (a hit marks its entry used);
        a match of the preamble alone counts as a miss."""
        for e, n in matches.values():
            self._clock += 1  # counts lookups: LRU order and staleness
            if e is not None:
                e.used = self._clock
            if e is not None and not e.pinned:
                self.counters.hits += 1
            else:
                self.counters.misses += 1
            self.counters.reused_tokens += n

    def end(self, plan: Plan) -> None:
        """Keep the admitted prefixes (copied from their working sequences, which the engine
        removes afterwards), evicting least recently used entries to make room; save the other
        misses to host memory."""
        if plan.warm:
            return
        for j in plan.spill:
            self.spill.put(plan.keys[j], plan.prefixes[j], lambda: self.moves.save(plan.work[j], plan.prefixes[j]))
        victims = lru_victims(self._entries, len(plan.admit), sum(len(plan.prefixes[j]) for j in plan.admit),
                              plan.protect, max_entries=self.max_entries, max_tokens=self.max_tokens)
        assert victims is not None, "begin() admitted more than fits once every unused entry is evicted"
        for e in victims:
            self._evict(e)
        state = Placement.MOVABLE if victims else Placement.IN_CELLS  # an eviction frees cells below them too
        for j in plan.admit:
            prefix = plan.prefixes[j]
            seq = self._free.pop()
            self.backend.copy(plan.work[j], seq, len(prefix))
            self._clock += 1
            self._add(Entry(tokens=list(prefix), seq=seq, key=plan.keys[j], state=state, used=self._clock,
                            window_from=plan.windows.get(plan.work[j], 0)))

    def _make_room(self, entries: int, tokens: int, protect: set[Entry]) -> bool:
        """Evict the least recently used entries (not pinned, not in `protect`) that must go for
        `entries` more entries of `tokens` tokens in all to fit; False, evicting none, if they cannot."""
        victims = lru_victims(self._entries, entries, tokens, protect, max_entries=self.max_entries,
                              max_tokens=self.max_tokens)
        for e in victims or ():
            self._evict(e)
        return victims is not None

    def pin(self, tokens: list[int], work_seq: int) -> None:
        """Keep `tokens` (already read into work_seq) for good. Call on an empty cache, before
        anything else is read, so its cells are the lowest."""
        if not self.enabled or len(tokens) < self.min_tokens or len(tokens) > self.max_tokens:
            return
        if self._entries:
            raise RuntimeError("the preamble must be pinned first")
        seq = self._free.pop()
        self.backend.copy(work_seq, seq, len(tokens))
        preamble = Entry(tokens=list(tokens), seq=seq, key=prefix_key(tokens), state=Placement.IN_CELLS, pinned=True)
        self.moves.preamble = preamble
        self._add(preamble)

    def clear(self) -> None:
        """Forget every snapshot but the pinned preamble, and host memory's (tests start afresh)."""
        self.spill.clear()
        for e in [e for e in self._entries if not e.pinned]:
            self._forget(e)  # not _evict: nothing to save
        self._missed.clear()

    def lost_placement(self) -> None:
        """After a failed batch nothing is known about free cells: move before the next use."""
        self._cells_freed()

    # --- bookkeeping ------------------------------------------------------------------------
    def _cells_freed(self) -> None:
        """Cells were freed, maybe below entries in place: move each before it is extended (not
        the pinned preamble: its cells are the lowest)."""
        for e in self._entries:
            if e.state is Placement.IN_CELLS and not e.pinned:
                e.state = Placement.MOVABLE

    def _add(self, entry: Entry) -> None:
        assert entry.state is not Placement.NOWHERE and entry not in self._entries, "an entry added twice"
        self._entries.append(entry)
        self.tokens += len(entry.tokens)
        self.keys = tuple(e.key for e in self._entries)

    def _forget(self, entry: Entry) -> None:
        assert entry.state is not Placement.NOWHERE, "an entry forgotten twice"
        self.backend.remove(entry.seq)
        self._entries.remove(entry)
        self._free.append(entry.seq)
        self.tokens -= len(entry.tokens)
        self.keys = tuple(e.key for e in self._entries)
        entry.state, entry.blob = Placement.NOWHERE, None

    def _evict(self, entry: Entry) -> None:
        """Save to host memory and forget; forgotten also if the save raises (it may have taken
        the preamble's positions out already)."""
        assert not entry.pinned and entry.state in (Placement.IN_CELLS, Placement.MOVABLE), entry.state
        try:
            self.spill.put(entry.key, entry.tokens, lambda: self.moves.save(entry.seq, entry.tokens))
        finally:
            self._forget(entry)
            self._cells_freed()  # its cells are free now, maybe below other entries

    def _relocate(self, movers: list[Entry]) -> None:
        """Take out the movers in cells, then restore every mover in order (IN_HOST ones from their
        blobs): they land first-fit, each IN_CELLS once restored. The others stay IN_CELLS: one in
        place had no free cell below it, so the only ones there now are the movers', the lowest,
        which the restores fill first (else every entry became a mover in turn, moved at each
        batch). If a save or restore raises, movers not restored are forgotten, never served half."""
        assert all(not e.pinned and e.state is not Placement.NOWHERE for e in movers)
        in_cells = [e for e in movers if e.state is not Placement.IN_HOST]
        if in_cells:
            self.counters.relocations += 1
        for e in in_cells:
            e.state = Placement.MOVABLE  # IN_CELLS again only once restored below
        try:
            for e, blob in zip(in_cells, self.moves.take_out(in_cells)):
                e.state, e.blob = Placement.IN_HOST, blob
            for e in movers:
                e.window_from = self.moves.load(e.seq, e.blob, e.tokens)
                e.state, e.blob = Placement.IN_CELLS, None
        except BaseException:
            for e in [e for e in movers if e.state is not Placement.IN_CELLS]:
                self._forget(e)
            self._cells_freed()
            raise
