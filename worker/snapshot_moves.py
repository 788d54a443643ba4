"""Moving a kept prefix's cells: saving them out of the context (to host memory, or before a
relocation) and restoring them first-fit, next to the pinned preamble. It reads entries and moves
cells; only the cache (worker/snapshots.py) records an entry's placement.

Invariant: a saved blob holds only the positions beyond the pinned preamble. Every kept prefix
starts with the preamble, whose cells are the lowest and never move; a restore shares them again
(seq_cp) instead of writing a second copy, so a restored prefix takes the cells a fresh read
would (a W4 state ~310 instead of ~550) and the preamble's cells stay the first in its sequence.
"""
from __future__ import annotations

from typing import Any

from worker.snapshot_parts import Entry, SeqBackend


class CellMover:
    def __init__(self, backend: SeqBackend) -> None:
        self.backend = backend
        self.preamble: Entry | None = None  # the pinned preamble, once pinned

    def _shared(self, tokens: list[int]) -> tuple[int, int]:
        """(sequence, length) of the pinned preamble if `tokens` go beyond it, else (-1, 0)."""
        first = self.preamble
        n = len(first.tokens) if first else 0
        return (first.seq, n) if 0 < n < len(tokens) and tokens[:n] == first.tokens else (-1, 0)

    def save(self, seq: int, tokens: list[int]) -> Any:
        """The cells of `seq` (holding `tokens`) beyond the pinned preamble, taken out of it."""
        _, base = self._shared(tokens)
        if base:
            self.backend.remove(seq, 0, base)
        return self.backend.save(seq)

    def load(self, seq: int, blob: Any, tokens: list[int]) -> int:
        """Restore what save() saved and share the preamble again; where its window starts: a
        saved sequence omits sliding-window cells outside its window, so a state longer than the
        window beyond the preamble comes back with a gap (above the preamble, while pos_min
        says 0), which the cache must not match across."""
        self.backend.restore(seq, blob)  # first-fit above the preamble's cells, the lowest
        src, base = self._shared(tokens)
        window_from = self.backend.pos_min(seq)
        if base:
            self.backend.copy(src, seq, base)
        return window_from if window_from > base else 0

    def take_out(self, entries: list[Entry]) -> list[Any]:
        """Save the cells of every entry, then remove them all, so that restoring them in order
        afterwards (load) puts them first-fit into the lowest free cells, their own among them.
        Returns the blobs in order; it changes no entry (the cache records where each one is)."""
        blobs = [self.save(e.seq, e.tokens) for e in entries]
        for e in entries:
            self.backend.remove(e.seq)
        return blobs
