"""Which worker gets a request: the least loaded, unless another one already holds its state.

Load is queued tokens; among equally loaded workers the one sent to longest ago wins, so an
idle fleet spreads distinct states over its workers. Prefix affinity: a worker that holds the
request's state prefix (it advertised the key as a snapshot, or the gateway sent it that
prefix recently) gets the request while its queue is at most affinity_slack_tokens longer than
the least loaded worker's. A repeated state is then read once per fleet, not once per worker,
and under load the affinity yields instead of piling work onto one worker.
"""
from __future__ import annotations

from collections import OrderedDict
from typing import Collection, Iterable, Protocol

from gateway.capacity import Limits, Loaded, fits


class PrefixMemory:
    """The prefix keys most recently sent to one worker, a bounded LRU sized like the worker's
    snapshot cache: what it probably still holds even if it does not advertise snapshots."""

    def __init__(self, size: int = 16) -> None:
        self.size = size
        self._keys: OrderedDict[str, None] = OrderedDict()

    def touch(self, key: str) -> None:
        self._keys[key] = None
        self._keys.move_to_end(key)
        while len(self._keys) > self.size:
            self._keys.popitem(last=False)

    def __contains__(self, key: str) -> bool:
        return key in self._keys

    def __len__(self) -> int:
        return len(self._keys)


class Candidate(Loaded, Protocol):
    @property
    def routable(self) -> bool: ...

    last_sent: float

    def holds(self, key: str) -> bool: ...


def _load(worker: Candidate) -> tuple[int, float]:
    return worker.queued_tokens, worker.last_sent


def choose(workers: Iterable[Candidate], *, key: str, tokens: int, limits: Limits,
           exclude: Collection[Candidate] = (), ignore_limits: bool = False) -> Candidate | None:
    """The worker for a request of `tokens` tokens whose state prefix has `key`, or None when
    no routable worker (outside `exclude`) has room. ignore_limits is for requests already
    accepted once (resent after a worker loss): they are owed an answer, not a 429."""
    live = [w for w in workers if w.routable and all(w is not x for x in exclude)]
    if not ignore_limits:
        live = [w for w in live if fits(w, tokens, limits)]
    if not live:
        return None
    least = min(live, key=_load)
    holders = [w for w in live if w.holds(key)]
    if holders:
        holder = min(holders, key=_load)
        if holder.queued_tokens <= least.queued_tokens + limits.affinity_slack_tokens:
            return holder
    return least
