"""FIFO token-budget batching with exactly one thread touching the model.

Requests wait in arrival order. A batch takes requests from the head while their new tokens fit
the budget; the first request always goes, however large, and the batch stops at the first
request that does not fit: nobody is skipped, so nobody starves. "New" is what a request really
adds to the batch: its suffixes and the part of its prefix that no state snapshot and no batch
mate already holds, which the engine estimates when the batch is taken.

Invariant: the queue, the busy flag and the counters are read and written only under one
condition variable (`_cond`), by the model thread as by the others (which only append, cancel,
clear, stop and read figures), so a heartbeat's figures are of one moment.
"""
from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Callable, Protocol

import msgspec

from shared.messages import Error, ErrorCode, Message, Result, SchedulerCounters, Score
from shared.config import Settings
from worker.engine import Engine
from worker.job import Job


class EngineLike(Protocol):
    def run(self, jobs: list[Job]) -> int: ...
    def new_tokens(self, job: Job, earlier: list[Job]) -> int: ...


@dataclass
class Pending:
    """A Score waiting for its batch, with the engine's view of it (margins land there)."""

    score: Score
    job: Job
    tokens: int  # all its tokens (queue depth); the budget uses the engine's estimate
    enqueued: float = field(default_factory=time.monotonic)

    @classmethod
    def from_score(cls, score: Score) -> Pending:
        job = Job(prefix=score.prefix, suffixes=score.suffixes, yes_ids=score.yes_ids, no_ids=score.no_ids)
        return cls(score, job, len(score.prefix) + job.suffix_reads)

    @property
    def request_id(self) -> str:
        return self.score.request_id

    @property
    def deadline(self) -> float:
        """time.time() after which the answer is useless."""
        return self.score.deadline


def take_batch(queue: deque[Pending], budget: int,
               cost: Callable[[Pending, list[Pending]], int] = lambda item, _: item.tokens) -> list[Pending]:
    """Pop the batch the policy allows from the head of `queue`; cost(item, batch so far) is
    the tokens item would add."""
    batch: list[Pending] = []
    used = 0
    while queue:
        tokens = cost(queue[0], batch)
        if batch and used + tokens > budget:
            break
        batch.append(queue.popleft())
        used += tokens
    return batch


class Scheduler:
    def __init__(self, engine: EngineLike, *, budget: int, max_requests: int) -> None:
        """budget: the batch_tokens setting; max_requests: the requests the engine can read at once."""
        self.engine = engine
        self.budget = budget
        self.max_requests = max_requests  # sequences the engine can hold at once
        self.counters = SchedulerCounters()
        self._queue: deque[Pending] = deque()
        self._cond = threading.Condition()
        self._stopping = False
        self._busy = False

    @classmethod
    def for_engine(cls, engine: Engine, settings: Settings) -> Scheduler:
        """As a worker runs one: the batch_tokens budget, as many requests as the engine holds."""
        return cls(engine, budget=settings.batch_tokens, max_requests=engine.max_batch_requests)

    # --- called from other threads --------------------------------------------------------
    def submit(self, item: Pending) -> None:
        with self._cond:
            self._queue.append(item)
            self._cond.notify()

    def cancel(self, request_id: str) -> bool:
        """Drop a request that has not started; False if it is running or unknown."""
        with self._cond:
            for item in self._queue:
                if item.request_id == request_id:
                    self._queue.remove(item)
                    self.counters.cancelled += 1
                    return True
        return False

    def clear(self) -> list[str]:
        """Drop every queued request (the gateway that sent them is gone); the running batch
        finishes. Returns their ids."""
        with self._cond:
            left = [item.request_id for item in self._queue]
            self._queue.clear()
            self.counters.cancelled += len(left)
            return left

    def stop(self) -> list[str]:
        """Stop after the running batch; returns the ids of requests that will not be run."""
        with self._cond:
            self._stopping = True
            left = [item.request_id for item in self._queue]
            self._queue.clear()
            self._cond.notify_all()
            return left

    def figures(self) -> tuple[SchedulerCounters, int, int]:
        """A copy of the counters, queued tokens and queued requests (the running batch
        included), all of one moment: what a heartbeat says of the scheduler."""
        with self._cond:
            queued = sum(i.tokens for i in self._queue), len(self._queue) + int(self._busy)
            return msgspec.structs.replace(self.counters), *queued

    # --- on the model thread -------------------------------------------------------------
    def run(self, emit: Callable[[Message], None]) -> None:
        """Serve until stop()."""
        while True:
            with self._cond:
                self._busy = False
                self._cond.wait_for(lambda: bool(self._queue) or self._stopping)
                if self._stopping:
                    return
                batch, expired = self._take()
                self._busy = bool(batch)
            for item in expired:
                emit(Error(request_id=item.request_id, code=ErrorCode.EXPIRED, message="deadline passed in queue"))
            if batch:
                self._run_batch(batch, emit)

    def _take(self) -> tuple[list[Pending], list[Pending]]:
        """The next batch (caller holds the lock), split into live and expired requests."""
        batch = take_batch(self._queue, self.budget,
                           lambda item, taken: self.engine.new_tokens(item.job, [t.job for t in taken]))
        while len(batch) > self.max_requests:  # rare: more tiny requests than sequences
            self._queue.appendleft(batch.pop())
        now = time.time()
        expired = [i for i in batch if i.deadline <= now]
        self.counters.expired += len(expired)
        return [i for i in batch if i.deadline > now], expired

    def _run_batch(self, batch: list[Pending], emit: Callable[[Message], None]) -> None:
        started = time.monotonic()
        try:
            read = self.engine.run([item.job for item in batch])
        except Exception as exc:  # an engine fault answers the batch; the worker lives on
            for item in batch:
                emit(Error(request_id=item.request_id, code=ErrorCode.ENGINE, message=str(exc)))
            return
        run_ms = (time.monotonic() - started) * 1000
        with self._cond:
            c = self.counters
            c.batches += 1
            c.requests += len(batch)
            c.batched_requests += len(batch) if len(batch) > 1 else 0
            c.tokens_read += read
        for item in batch:
            emit(Result(
                request_id=item.request_id,
                margins=item.job.margins,
                queue_ms=(started - item.enqueued) * 1000,
                run_ms=run_ms,
                batch_requests=len(batch),
                read_tokens=read,
            ))
