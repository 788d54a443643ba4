"""Backpressure, decided in this one module: how much a worker may queue, how fast it reads,
when a request is refused, and how long a refused client should wait.

Queues are bounded per worker in tokens to read (routing.Work) and in requests, so an overload
turns into fast 429s instead of a queue that grows until every request misses its deadline.
Retry-After is the time until some worker has room, from the tokens its queue will read and
its measured reading rate. Every refusal is an `Unavailable`, raised here or by placement (a
deadline passed, a request lost twice) and turned into HTTP in one place, the error middleware
of gateway/app.py; the door (gateway/shedding.py) and placement only ask this module.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Collection, Protocol

NO_WORKER_RETRY_S = 2  # Retry-After while no worker is up: a restart takes a few seconds
TOKENS_PER_S_PER_CORE = 200.0  # before the first measurement (2.3 ms/token at 2 threads here)
RATE_WEIGHT = 0.3  # weight of the newest batch in the moving average
MAX_RETRY_AFTER_S = 60


class Unavailable(Exception):
    """The request is not served now: 429 (every queue is full) or 503 (no worker is up, its
    deadline passed, or it was lost with two workers); retry_after in whole seconds."""

    def __init__(self, status: int, message: str, retry_after: int) -> None:
        super().__init__(message)
        self.status = status
        self.retry_after = retry_after


@dataclass(frozen=True)
class Limits:
    """The settings of the same names (shared/config.py), which hold their defaults."""

    queue_tokens: int
    queue_requests: int
    affinity_slack_tokens: int


class Loaded(Protocol):
    """What capacity needs to know of a worker; routing's Candidate adds the rest."""

    @property
    def queued_reads(self) -> int:
        """Tokens the worker will read for its queue (routing.Work.cost summed)."""

    @property
    def queued_requests(self) -> int: ...

    @property
    def tokens_per_s(self) -> float: ...


def fits(worker: Loaded, tokens: int, limits: Limits) -> bool:
    """Room for `tokens` more? An idle worker takes any request, however long."""
    if worker.queued_requests == 0:
        return True
    return (worker.queued_requests < limits.queue_requests
            and worker.queued_reads + tokens <= limits.queue_tokens)


def seconds_until_room(worker: Loaded, tokens: int, limits: Limits) -> float:
    """Time for `worker` to read enough of its queue that `tokens` more would fit."""
    excess_tokens = worker.queued_reads + tokens - limits.queue_tokens
    per_request = worker.queued_reads / max(1, worker.queued_requests)
    excess_requests = (worker.queued_requests - limits.queue_requests + 1) * per_request
    return max(0.0, excess_tokens, excess_requests) / worker.tokens_per_s


def retry_after_s(workers: Collection[Loaded], tokens: int, limits: Limits) -> int:
    """Whole seconds (never 0: clients would retry in a tight loop) until one of the workers that
    are up has room; NO_WORKER_RETRY_S while none is."""
    if not workers:
        return NO_WORKER_RETRY_S
    wait = min(seconds_until_room(w, tokens, limits) for w in workers)
    return min(MAX_RETRY_AFTER_S, max(1, math.ceil(wait)))


def refusal(up: Collection[Loaded], tokens: int, limits: Limits) -> Unavailable:
    """Why a request of `tokens` that no worker can take is refused: no worker up (503) or every
    queue full (429)."""
    status, why = (429, "every worker's queue is full") if up else (503, "no worker is available")
    return Unavailable(status, why, retry_after_s(up, tokens, limits))


def full(up: Collection[Loaded], limits: Limits, reserved: int = 0) -> bool:
    """Whether workers are up but none could take even the smallest request, or every free place
    is `reserved` by requests on their way to a queue (a burst). With no worker up a request is
    not refused here: the request path answers 422 for bad input, else 503."""
    free = sum(max(0, limits.queue_requests - w.queued_requests) for w in up)
    return bool(up) and not (any(fits(w, 1, limits) for w in up) and free > reserved)


class TokenRate:
    """Tokens a worker reads per second, a moving average over its batches."""

    def __init__(self, cores: int) -> None:
        self.value = TOKENS_PER_S_PER_CORE * max(1, cores)

    def add(self, tokens: int, seconds: float) -> None:
        if tokens > 0 and seconds > 0:
            self.value += RATE_WEIGHT * (tokens / seconds - self.value)
