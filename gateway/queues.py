"""The requests at each worker as the gateway sees them: placement's state, kept apart from
membership's (who is up).

A `WorkerQueue` belongs to one incarnation of a worker (a restart gets a fresh one) and holds what
placement alone writes: the requests sent to it and not yet answered, the prefixes sent to it
recently, how many it answered and how fast it reads. It reads the worker's own facts (up or not,
its snapshot keys) from membership's `WorkerState` and never changes them. Routing and capacity
see a worker through this object (it is their `Candidate`).

Invariant: a request is in a queue only while placement tracks it (`Inflight.worker` is that
queue), and the queue of a worker that membership took down is empty.
"""
from __future__ import annotations

import asyncio
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Iterable, Literal

import msgspec

from gateway.capacity import TokenRate
from gateway.membership import WorkerState
from gateway.routing import PrefixMemory, Work
from shared.messages import Result, Score

Stage = Literal["queued", "parked", "done"]


@dataclass(eq=False)
class Inflight:
    """One accepted request, from submit until its waiting ends."""

    score: Score
    work: Work
    future: asyncio.Future[Result]
    cost: int = 0  # work.cost(queue) when it was queued: its share of that worker's queue
    worker: WorkerQueue | None = None  # None while parked
    resends: int = 0
    lost_at: float = 0.0  # when a worker holding it was lost (monotonic), for the log
    tried: list[WorkerQueue] = field(default_factory=list)  # incarnations that lost or returned it

    @property
    def request_id(self) -> str:
        return self.score.request_id


class WorkerQueue:
    """One worker incarnation's queue and the gateway's measures of it."""

    def __init__(self, worker: WorkerState, affinity_memory: int) -> None:
        self.worker = worker
        self.requests: dict[str, Inflight] = {}  # by request id
        self.memory = PrefixMemory(affinity_memory)
        self.served = 0
        self.last_sent = 0.0
        self.rate = TokenRate(len(worker.cores))

    @property
    def worker_id(self) -> str:
        return self.worker.worker_id

    @property
    def routable(self) -> bool:
        return self.worker.up

    @property
    def queued_tokens(self) -> int:
        return sum(i.work.prompt for i in self.requests.values())

    @property
    def queued_reads(self) -> int:
        return sum(i.cost for i in self.requests.values())

    @property
    def queued_requests(self) -> int:
        return len(self.requests)

    @property
    def tokens_per_s(self) -> float:
        return self.rate.value

    def holds(self, key: str) -> bool:
        """It advertised the prefix as kept, or was sent it recently."""
        return key in self.worker.status.snapshot_keys or key in self.memory

    def add(self, item: Inflight) -> None:
        item.worker = self
        item.cost = item.work.cost(self)
        self.requests[item.request_id] = item
        self.memory.touch(item.work.key)
        self.last_sent = time.monotonic()

    def take(self, request_id: str) -> Inflight | None:
        """Remove a request from the queue (answered, returned, withdrawn); None if not here."""
        item = self.requests.pop(request_id, None)
        if item is not None:
            item.worker = None
        return item

    def take_all(self) -> list[Inflight]:
        """Empty the queue (its worker was taken down)."""
        items = list(self.requests.values())
        self.requests.clear()
        for item in items:
            item.worker = None
        return items

    def describe(self) -> dict:
        """The worker as /health shows it: its own facts and the gateway's view of its queue."""
        w = self.worker
        return {
            "id": w.worker_id,
            "pid": w.pid,
            "cores": w.cores,
            "pinned": w.status.pinned,
            "state": w.state,
            "queued_tokens": self.queued_tokens,
            "queued_reads": self.queued_reads,
            "queued_requests": self.queued_requests,
            "served": self.served,
            "tokens_per_s": round(self.tokens_per_s, 1),
            "stats": msgspec.to_builtins(w.stats),
        }


def lifecycle(inflight: dict[str, Inflight], parked: list[Inflight], queues: Iterable[WorkerQueue]) -> Counter[Stage]:
    """How many of placement's requests (`inflight`, by id) are at each stage; raises RuntimeError
    if one that is pending is in no place or in two, or one that is done is still in a place; if a
    queue or the parked list holds a request placement does not track (or that does not point back
    at its queue); or if a down worker's queue is not empty."""
    waiting = {item.request_id: item for item in parked}
    if len(waiting) != len(parked):
        raise RuntimeError("a request is parked twice")
    for rid, item in waiting.items():
        if inflight.get(rid) is not item:
            raise RuntimeError(f"request {rid} is parked but not tracked")
    queued: set[str] = set()
    for q in queues:
        if q.requests and q.worker.state == "down":
            raise RuntimeError(f"worker {q.worker_id} is down and holds {len(q.requests)} requests")
        for rid, item in q.requests.items():
            if inflight.get(rid) is not item or item.worker is not q:
                raise RuntimeError(f"request {rid} is in {q.worker_id}'s queue but not placed there")
            queued.add(rid)
    stages: Counter[Stage] = Counter()
    for rid, item in inflight.items():
        at_worker, is_parked = rid in queued, rid in waiting
        if item.future.done():
            if at_worker or is_parked:
                raise RuntimeError(f"request {rid} is answered but still {'queued' if at_worker else 'parked'}")
            stages["done"] += 1
        elif at_worker == is_parked:
            raise RuntimeError(f"request {rid} is {'both queued and parked' if at_worker else 'nowhere'}")
        else:
            stages["queued" if at_worker else "parked"] += 1
    return stages
