"""Where each accepted request is: which worker's queue holds it, or that it waits for one.

A request nobody can take at once is refused (gateway/capacity.py says how). Once
accepted it is owed an answer: if its worker is lost it is sent once to another (requests are pure
reads, so that is safe, and the first answer wins); a worker that drains hands its queue back and
those requests are placed again; one nobody can take waits, parked, for a worker until its
deadline.

Invariant (the request lifecycle): an accepted request whose answer is still pending is in
exactly one place, queued at one worker (`item.worker.inflight`) or parked; then it is done (its
future holds a result or an error) and is forgotten when its waiting ends. `lifecycle()` checks it.
"""
from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import KeysView, Literal

from gateway.capacity import NO_WORKER_RETRY_S, Limits, Unavailable, full, refusal, retry_after_s
from gateway.membership import Membership, WorkerState
from gateway.routing import Work, choose
from shared.messages import Cancel, Error, ErrorCode, Result, Score, prefix_key, suffix_tokens

log = logging.getLogger("jevfleet.fleet")

RESENDS = 1  # a request whose worker was lost is sent again once

Stage = Literal["queued", "parked", "done"]


class WorkerFailed(Exception):
    """The worker could not answer the request (an engine fault)."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(eq=False)
class Inflight:
    """One accepted request, from submit until its waiting ends."""

    score: Score
    work: Work
    future: asyncio.Future[Result]
    cost: int = 0  # work.cost(worker) when it was assigned: its share of that worker's queue
    worker: WorkerState | None = None  # None while parked
    resends: int = 0
    lost_at: float = 0.0  # when a worker holding it was lost (monotonic), for the log
    tried: list[WorkerState] = field(default_factory=list)  # incarnations that lost or returned it


class Placement:
    """The accepted requests and the decisions on where each goes."""

    def __init__(self, membership: Membership, limits: Limits, *, preamble_tokens: int = 0) -> None:
        """preamble_tokens: how many tokens every prompt starts with that each worker keeps."""
        self.membership = membership
        self.limits = limits
        self.preamble_tokens = preamble_tokens
        self.counters = {"resent": 0, "handed_back": 0, "refused": 0, "expired": 0, "cancelled": 0}
        self._inflight: dict[str, Inflight] = {}
        self._parked: list[Inflight] = []

    def describe(self) -> dict:
        return {**self.counters, "inflight": len(self._inflight), "parked": len(self._parked)}

    @property
    def inflight_ids(self) -> KeysView[str]:
        return self._inflight.keys()

    def lifecycle(self) -> Counter[Stage]:
        """How many accepted requests are at each stage; raises RuntimeError if one that is
        pending is in no place or in two (the module's invariant)."""
        stages: Counter[Stage] = Counter()
        for rid, item in self._inflight.items():
            if item.future.done():
                stages["done"] += 1
                continue
            queued = item.worker is not None and item.worker.inflight.get(rid) is item
            parked = any(p is item for p in self._parked)
            if queued == parked:
                raise RuntimeError(f"request {rid} is {'both queued and parked' if queued else 'nowhere'}")
            stages["queued" if queued else "parked"] += 1
        return stages

    def work(self, score: Score) -> Work:
        questions = suffix_tokens(score.suffixes)
        state = max(0, len(score.prefix) - self.preamble_tokens)
        return Work(key=prefix_key(score.prefix), prompt=len(score.prefix) + questions, cold=state + questions,
                    warm=questions)

    async def submit(self, score: Score) -> Result:
        """Send to a worker and wait for its result, resent elsewhere if that worker is lost.
        Raises Unavailable at once when no worker can take it (429/503), or at its deadline."""
        work = self.work(score)
        worker = choose(self.membership.workers.values(), work, limits=self.limits)
        if worker is None:
            raise self._refusal(work.cold)
        loop = asyncio.get_running_loop()
        item = Inflight(score=score, work=work, future=loop.create_future())
        self._inflight[score.request_id] = item
        try:
            self._assign(worker, item)
            try:
                async with asyncio.timeout_at(loop.time() + max(0.0, score.deadline - time.time())):
                    return await asyncio.shield(item.future)
            except TimeoutError:
                self._past_deadline(item)
            return await item.future
        finally:
            self._release(item)

    def refusal_when_full(self, reserved: int = 0) -> Unavailable | None:
        """The 429 for any request while every queue is full (gateway/capacity.py decides)."""
        up = self.membership.up()
        return self._refusal(1) if full(up, self.limits, reserved) else None

    def abandon_all(self, why: str) -> None:
        """Answer every pending request 503 (the gateway is stopping)."""
        for item in list(self._inflight.values()):
            if not item.future.done():
                item.future.set_exception(Unavailable(503, why, NO_WORKER_RETRY_S))

    def _refusal(self, tokens: int) -> Unavailable:
        refused = refusal(self.membership.up(), tokens, self.limits)
        if refused.status == 429:
            self.counters["refused"] += 1
        return refused

    def _past_deadline(self, item: Inflight) -> None:
        """A request still waiting at its deadline gets 503: at once if it is parked; if it is
        on a worker, that worker is told to drop it and answers "cancelled" if it had not
        started it. A request a worker is already reading is allowed to finish."""
        if item.future.done():
            return
        if item.worker is None:
            self._expire(item)
        else:
            self.membership.send(item.worker, Cancel(request_id=item.score.request_id))

    def _expire(self, item: Inflight) -> None:
        self.counters["expired"] += 1
        item.future.set_exception(Unavailable(503, "the request waited past its deadline",
                                              self._retry_after(item.work.cold)))

    def _retry_after(self, tokens: int) -> int:
        return retry_after_s(self.membership.up(), tokens, self.limits)

    def _assign(self, worker: WorkerState, item: Inflight) -> None:
        item.worker = worker
        item.cost = item.work.cost(worker)
        worker.inflight[item.score.request_id] = item
        worker.memory.touch(item.work.key)
        worker.last_sent = time.monotonic()
        self.membership.send(worker, item.score)  # if that fails, the worker is marked down and the item resent

    def _release(self, item: Inflight) -> None:
        """The waiting is over (answered, deadline, or client gone): forget the request, and
        take it out of its worker's queue if it was not answered."""
        rid = item.score.request_id
        self._inflight.pop(rid, None)
        if item in self._parked:
            self._parked.remove(item)
        worker = item.worker
        if worker is not None and worker.inflight.pop(rid, None) is not None:
            self.counters["cancelled"] += 1
            if worker.state != "down":
                self.membership.send(worker, Cancel(request_id=rid))

    def _place(self, item: Inflight) -> None:
        """Send an accepted request to the best routable worker that has not already lost or
        returned it, queue limits ignored (it is owed an answer, not a 429); park it if none."""
        item.worker = None
        if item.score.deadline <= time.time():  # a worker would only answer "expired"
            self._expire(item)
            return
        worker = choose(self.membership.workers.values(), item.work, limits=self.limits, exclude=item.tried,
                        ignore_limits=True)
        if worker is None:
            self._parked.append(item)
        else:
            self._assign(worker, item)

    def _resend(self, item: Inflight, *, counted: bool) -> None:
        """Place a request whose worker was lost again. Only a confirmed loss (the process is
        gone) uses up its one resend: a request that killed two workers is not tried on a
        third. A worker that was merely silent may be alive and slow (a starved CPU), so that
        resend is free and does not bar the worker from the request once it is back."""
        if item.future.done():
            return
        if counted:
            if item.resends >= RESENDS:
                item.future.set_exception(Unavailable(503, "two workers were lost while holding the request",
                                                      self._retry_after(item.work.cold)))
                return
            item.resends += 1
        self.counters["resent"] += 1
        self._place(item)

    # --- what membership and the link report ------------------------------------------------
    def orphaned(self, worker: WorkerState, orphans: list[Inflight], gone: bool) -> None:
        """`worker` was taken down holding `orphans`: resend them (see _resend)."""
        now = time.monotonic()
        for item in orphans:
            if gone:
                item.tried.append(worker)
            item.lost_at = now
            self._resend(item, counted=gone)

    def unpark(self) -> None:
        """A worker came up: place every parked request again."""
        parked, self._parked = self._parked, []
        for item in parked:
            self._place(item)

    def hand_back(self, worker: WorkerState, request_ids: list[str]) -> None:
        """A draining worker returned these queued requests: place them elsewhere."""
        for request_id in request_ids:
            item = worker.inflight.pop(request_id, None)
            if item is not None and not item.future.done():
                self.counters["handed_back"] += 1
                item.tried.append(worker)
                self._place(item)

    def on_answer(self, identity: bytes, msg: Result | Error) -> None:
        """A worker's Result or Error: the first answer to a request wins."""
        item = self._inflight.get(msg.request_id)
        if item is None or item.future.done():
            return  # answered already, given up, or the client left
        owner = item.worker
        if owner is not None:
            owner.inflight.pop(msg.request_id, None)
        answered_by = self.membership.sender(identity)
        if owner is not None and answered_by is not owner and owner.state != "down":
            self.membership.send(owner, Cancel(request_id=msg.request_id))  # an earlier holder was faster
        if isinstance(msg, Result):
            if answered_by is not None:
                answered_by.served += 1
                answered_by.rate.add(msg.read_tokens, msg.run_ms / 1000)  # new tokens, like Work
            if item.lost_at:
                log.info("request %s re-served %.0f ms after its worker was lost", msg.request_id,
                         (time.monotonic() - item.lost_at) * 1000)
            item.future.set_result(msg)
        elif msg.code == ErrorCode.DRAINING:  # it reached a worker that had started to drain
            if owner is not None:
                item.tried.append(owner)
            self._place(item)
        elif msg.code in (ErrorCode.EXPIRED, ErrorCode.CANCELLED):  # dropped unread at or past its deadline
            self._expire(item)
        else:
            item.future.set_exception(WorkerFailed(msg.code, msg.message))
