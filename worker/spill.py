"""The host-memory tier of the state snapshots (worker/snapshots.py): the saved KV cells of
prefixes that left the context's cells or were never let in, in a byte-bounded LRU.

Why: cells are few and every kept cell slows every later read (llama.cpp attends over the whole
range of used cells), while process memory is plentiful. A state that comes back after its cells
are gone costs a restore (a memcpy: about 1 ms for a 540-token prefix, 306 tokens beyond the
preamble; its save about 5 ms, a 5.4 MB blob; docs/benchmarks-history.md) instead of a read (about a
second). llama-server keeps a host-memory prompt cache for the same reason (`--cache-ram`).

Invariant: a blob holds exactly the bytes llama.cpp saved for the cells of one prefix beyond the
pinned preamble (worker/snapshot_moves.py), so restoring it and sharing the preamble's cells again gives
back the cells a fresh read makes, and an answer read from a restored prefix equals a fresh read's
(tests/test_snapshots.py). Blobs are looked up by the key of the whole prefix only: the same state
again, with other questions.
"""
from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Callable


@dataclass
class Spilled:
    tokens: list[int]
    blob: Any
    size: int


class SpillStore:
    def __init__(self, max_bytes: int) -> None:
        """A blob's size is its len(): bytes for llama.cpp's ctypes arrays, cells for tests' fakes."""
        self.max_bytes = max(0, max_bytes)
        self.bytes = 0
        self._blobs: OrderedDict[str, Spilled] = OrderedDict()
        self.keys: tuple[str, ...] = ()  # replaced whole, so other threads may read it

    @property
    def enabled(self) -> bool:
        return self.max_bytes > 0

    def __contains__(self, key: str) -> bool:
        return key in self._blobs

    def __len__(self) -> int:
        return len(self._blobs)

    def take(self, key: str, tokens: list[int]) -> Any | None:
        """The blob saved for exactly `tokens` (kept, now the most recently used), or None."""
        item = self._blobs.get(key)
        if item is None or item.tokens != tokens:  # a key is a 64-bit hash: check the tokens
            return None
        self._blobs.move_to_end(key)
        return item.blob

    def put(self, key: str, tokens: list[int], save: Callable[[], Any]) -> None:
        """Keep the blob save() returns (the cells of exactly `tokens`; saved only if not kept
        yet), dropping the least recently used blobs to make room; one larger than the whole
        budget is not kept."""
        if not self.enabled or key in self._blobs:
            return
        blob = save()
        size = len(blob)
        if size > self.max_bytes:
            return
        while self.bytes + size > self.max_bytes:
            _, old = self._blobs.popitem(last=False)
            self.bytes -= old.size
        self._blobs[key] = Spilled(list(tokens), blob, size)
        self.bytes += size
        self.keys = tuple(self._blobs)

    def figures(self) -> dict[str, int]:
        """Its part of shared.messages.SnapshotStats."""
        return {"ram_kept": len(self._blobs), "ram_bytes": self.bytes, "ram_max_bytes": self.max_bytes}

    def clear(self) -> None:
        self._blobs.clear()
        self.bytes = 0
        self.keys = ()
