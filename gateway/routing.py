"""Which worker gets a request: the least loaded, unless another one already holds its state.

Load is queued prompt tokens; among equally loaded workers the one sent to longest ago wins, so
an idle fleet spreads distinct states over its workers. Prefix affinity: a worker that holds the
request's state prefix (it advertised the key as a snapshot, or the gateway sent it that
prefix recently) gets the request while its queue is at most affinity_slack_tokens longer than
the least loaded worker's. A repeated state is then read once per fleet, not once per worker,
and under load the affinity yields instead of piling work onto one worker.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Collection, Iterable, Protocol

from gateway.capacity import Limits, Loaded, fits
from shared.recent import RecentKeys


class PrefixMemory(RecentKeys):
    """The prefix keys most recently sent to one worker: what it probably holds (in cells or in
    host memory) before its heartbeats list it, so a repeat goes where the first went."""


class Candidate(Loaded, Protocol):
    @property
    def routable(self) -> bool: ...

    @property
    def queued_tokens(self) -> int:
        """Prompt tokens of its queue: the balance measure, so that a holder yields once it is
        a request ahead and a hot state spreads to more workers."""

    last_sent: float

    def holds(self, key: str) -> bool: ...


@dataclass(frozen=True)
class Work:
    """A request as queue load. `prompt` tokens count for balance; for the queue bound what
    counts is the tokens a worker will read: every worker keeps the profile's preamble, so
    nobody reads that; a worker that holds the state's prefix reads only the questions (warm),
    any other reads the state too (cold). Bounding prompt tokens instead would refuse a queue
    of repeated long states that is twenty times shorter in time than it looks."""

    key: str  # prefix_key of the request's prefix
    prompt: int
    cold: int
    warm: int

    def cost(self, worker: Candidate) -> int:
        return self.warm if worker.holds(self.key) else self.cold


def _load(worker: Candidate) -> tuple[int, float]:
    return worker.queued_tokens, worker.last_sent


def choose(workers: Iterable[Candidate], work: Work, *, limits: Limits,
           exclude: Collection[Candidate] = (), ignore_limits: bool = False) -> Candidate | None:
    """The worker for `work`, or None when no routable worker (outside `exclude`) has room.
    ignore_limits is for requests already accepted once (resent after a worker loss): they are
    owed an answer, not a 429."""
    live = [w for w in workers if w.routable and all(w is not x for x in exclude)]
    if not ignore_limits:
        live = [w for w in live if fits(w, work.cost(w), limits)]
    if not live:
        return None
    least = min(live, key=_load)
    holders = [w for w in live if w.holds(work.key)]
    if holders:
        holder = min(holders, key=_load)
        if holder.queued_tokens <= least.queued_tokens + limits.affinity_slack_tokens:
            return holder
    return least
