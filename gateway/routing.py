"""Which worker gets a request: the live worker with the fewest queued tokens."""
from __future__ import annotations

from typing import Iterable, Protocol


class Candidate(Protocol):
    worker_id: str
    up: bool

    @property
    def queued_tokens(self) -> int: ...


def pick_worker(workers: Iterable[Candidate], exclude: frozenset[str] = frozenset()) -> Candidate | None:
    live = [w for w in workers if w.up and w.worker_id not in exclude]
    return min(live, key=lambda w: (w.queued_tokens, w.worker_id), default=None)
