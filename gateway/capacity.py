"""How much a worker may queue, how fast it reads, and how long a refused client should wait.

Queues are bounded per worker in tokens to read (routing.Work) and in requests, so an overload
turns into fast 429s instead of a queue that grows until every request misses its deadline.
Retry-After is the time until some worker has room, from the tokens its queue will read and
its measured reading rate.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Protocol

TOKENS_PER_S_PER_CORE = 200.0  # before the first measurement (2.3 ms/token at 2 threads here)
RATE_WEIGHT = 0.3  # weight of the newest batch in the moving average
MAX_RETRY_AFTER_S = 60


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


def retry_after_s(workers: Iterable[Loaded], tokens: int, limits: Limits) -> int:
    """Whole seconds (never 0: clients would retry in a tight loop) until a worker has room."""
    waits = [seconds_until_room(w, tokens, limits) for w in workers]
    wait = min(waits) if waits else 1.0
    return min(MAX_RETRY_AFTER_S, max(1, math.ceil(wait)))


class TokenRate:
    """Tokens a worker reads per second, a moving average over its batches."""

    def __init__(self, cores: int) -> None:
        self.value = TOKENS_PER_S_PER_CORE * max(1, cores)

    def add(self, tokens: int, seconds: float) -> None:
        if tokens > 0 and seconds > 0:
            self.value += RATE_WEIGHT * (tokens / seconds - self.value)
