"""What other threads may know of the model thread's engine (worker/engine.py): an immutable
status the model thread builds after each batch and puts in place of the last one.

Invariant: an EngineStatus is never changed once built, and holds nothing the model thread goes on
changing (its snapshot figures are a copy), so a heartbeat on the main thread reads it without a
lock and without calling into the engine, which only the model thread may do.
"""
from __future__ import annotations

import msgspec

from shared.messages import SnapshotStats
from worker.snapshots import SnapshotCache


class EngineStatus(msgspec.Struct, frozen=True, kw_only=True):
    snapshot_keys: frozenset[str] = frozenset()  # prefix_key of every prefix kept, in cells or host memory
    state_snapshots: SnapshotStats = msgspec.field(default_factory=SnapshotStats)  # a copy no one else holds


def status_of(cache: SnapshotCache) -> EngineStatus:
    """The status of an engine whose snapshot cache is `cache` (on the model thread only)."""
    return EngineStatus(snapshot_keys=cache.held_keys(), state_snapshots=cache.stats())
