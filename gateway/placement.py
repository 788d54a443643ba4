"""Where each accepted request is: which worker's queue holds it, or that it waits for one.

A request nobody can take at once is refused (gateway/capacity.py says how). Once
accepted it is owed an answer: if its worker is lost it is sent once to another (requests are pure
reads, so that is safe, and the first answer wins); a worker that drains hands its queue back and
those requests are placed again; one nobody can take waits, parked, for a worker until its
deadline.

Placement owns the queues (gateway/queues.py: one per worker incarnation) and is their only
writer; membership (gateway/membership.py) says who is up and reports each worker that leaves or
enters service, and placement takes back or fills queues in answer. (vLLM's v1 engine splits its
scheduler the same way: the scheduler owns the requests and their queues, and what it learns of
the engine's state arrives as reports, never as writes into its structures.)

Invariant (the request lifecycle): an accepted request whose answer is still pending is in
exactly one place, queued at one worker (`item.worker.requests`) or parked; then it is done (its
future holds a result or an error), in no place, and is forgotten when its waiting ends. A queue
or the parked list holds only requests placement tracks, and the queue of a worker that is down
is empty. `lifecycle()` checks
it; with `check` on (the tests' fleets) it runs after every event and a breach is logged and
counted in /health.
"""
from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from typing import KeysView

from gateway.capacity import NO_WORKER_RETRY_S, Limits, Unavailable, full, refusal, retry_after_s
from gateway.membership import Membership, WorkerState
from gateway.queues import Inflight, Stage, WorkerQueue, lifecycle
from gateway.routing import Work, choose
from shared.messages import Cancel, Error, ErrorCode, Result, Score, prefix_key, suffix_tokens

log = logging.getLogger("jevfleet.fleet")

RESENDS = 1  # a request whose worker was lost is sent again once


class WorkerFailed(Exception):
    """The worker could not answer the request (an engine fault)."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


class Placement:
    """The accepted requests, the workers' queues, and the decisions on where each request goes."""

    def __init__(self, membership: Membership, limits: Limits, *, preamble_tokens: int = 0,
                 affinity_memory: int = 64, check: bool = False) -> None:
        """preamble_tokens: how many tokens every prompt starts with that each worker keeps;
        affinity_memory: prefixes remembered per worker (routing.PrefixMemory); check: run
        lifecycle() after every event."""
        self.membership = membership
        self.limits = limits
        self.preamble_tokens = preamble_tokens
        self.affinity_memory = affinity_memory
        self.check = check
        self.counters = {"resent": 0, "handed_back": 0, "refused": 0, "expired": 0, "cancelled": 0,
                         "lifecycle_checks": 0, "lifecycle_breaches": 0}
        self._inflight: dict[str, Inflight] = {}
        self._parked: list[Inflight] = []
        self._queues: dict[str, WorkerQueue] = {}  # by worker id: its current incarnation's

    def describe(self) -> dict:
        return {**self.counters, "inflight": len(self._inflight), "parked": len(self._parked)}

    @property
    def inflight_ids(self) -> KeysView[str]:
        return self._inflight.keys()

    def queue(self, worker: WorkerState) -> WorkerQueue:
        """The queue of this incarnation of a worker, made on first use; a restarted worker gets a
        fresh one (its predecessor's is empty: it was taken down first)."""
        q = self._queues.get(worker.worker_id)
        if q is None or q.worker is not worker:
            assert q is None or not q.requests, f"replaced worker {worker.worker_id} still holds requests"
            q = self._queues[worker.worker_id] = WorkerQueue(worker, self.affinity_memory)
        return q

    def queues(self) -> dict[str, WorkerQueue]:
        """Every member's queue, by worker id (down and draining ones too)."""
        return {wid: self.queue(w) for wid, w in self.membership.workers.items()}

    def lifecycle(self) -> Counter[Stage]:
        """How many accepted requests are at each stage; raises RuntimeError where the module's
        invariant does not hold (gateway/queues.py lifecycle)."""
        return lifecycle(self._inflight, self._parked, self._queues.values())

    def _check(self) -> None:
        """With `check` on: the invariant after an event; a breach is logged and counted, and the
        gateway goes on (a test that turned the check on asserts the count)."""
        if not self.check:
            return
        self.counters["lifecycle_checks"] += 1
        try:
            self.lifecycle()
        except RuntimeError as exc:
            self.counters["lifecycle_breaches"] += 1
            log.error("request lifecycle broken: %s", exc)

    def work(self, score: Score) -> Work:
        questions = suffix_tokens(score.suffixes)
        state = max(0, len(score.prefix) - self.preamble_tokens)
        return Work(key=prefix_key(score.prefix), prompt=len(score.prefix) + questions, cold=state + questions,
                    warm=questions)

    async def submit(self, score: Score) -> Result:
        """Send to a worker and wait for its result, resent elsewhere if that worker is lost.
        Raises Unavailable at once when no worker can take it (429/503), or at its deadline."""
        work = self.work(score)
        queue = choose(self.queues().values(), work, limits=self.limits)
        if queue is None:
            raise self._refusal(work.cold)
        loop = asyncio.get_running_loop()
        item = Inflight(score=score, work=work, future=loop.create_future())
        self._inflight[score.request_id] = item
        try:
            self._assign(queue, item)
            self._check()
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
        return self._refusal(1) if full(self._up(), self.limits, reserved) else None

    def abandon_all(self, why: str) -> None:
        """Answer every pending request 503 (the gateway is stopping)."""
        for queue in self._queues.values():
            queue.take_all()
        self._parked.clear()
        for item in list(self._inflight.values()):
            if not item.future.done():
                item.future.set_exception(Unavailable(503, why, NO_WORKER_RETRY_S))

    def _up(self) -> list[WorkerQueue]:
        return [self.queue(w) for w in self.membership.up()]

    def _refusal(self, tokens: int) -> Unavailable:
        refused = refusal(self._up(), tokens, self.limits)
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
            self.membership.send(item.worker.worker, Cancel(request_id=item.request_id))
        self._check()

    def _unplace(self, item: Inflight) -> WorkerQueue | None:
        """Take a request out of its place, its worker's queue or the parked list, as it is
        answered; the queue it was in."""
        queue = item.worker
        if queue is not None:
            queue.take(item.request_id)
        elif item in self._parked:
            self._parked.remove(item)
        return queue

    def _expire(self, item: Inflight) -> None:
        self._unplace(item)
        self.counters["expired"] += 1
        item.future.set_exception(Unavailable(503, "the request waited past its deadline",
                                              self._retry_after(item.work.cold)))

    def _retry_after(self, tokens: int) -> int:
        return retry_after_s(self._up(), tokens, self.limits)

    def _assign(self, queue: WorkerQueue, item: Inflight) -> None:
        queue.add(item)
        self.membership.send(queue.worker, item.score)  # a failure takes the worker down later: see worker_down

    def _release(self, item: Inflight) -> None:
        """The waiting is over (answered, deadline, or client gone): forget the request, and
        take it out of its worker's queue if it was not answered."""
        rid = item.request_id
        self._inflight.pop(rid, None)
        if item in self._parked:
            self._parked.remove(item)
        queue = item.worker
        if queue is not None and queue.take(rid) is not None:
            self.counters["cancelled"] += 1
            if queue.worker.state != "down":
                self.membership.send(queue.worker, Cancel(request_id=rid))
        self._check()

    def _place(self, item: Inflight) -> None:
        """Send an accepted request to the best routable worker that has not already lost or
        returned it, queue limits ignored (it is owed an answer, not a 429); park it if none."""
        item.worker = None
        if item.score.deadline <= time.time():  # a worker would only answer "expired"
            self._expire(item)
            return
        queue = choose(self.queues().values(), item.work, limits=self.limits, exclude=item.tried,
                       ignore_limits=True)
        if queue is None:
            self._parked.append(item)
        else:
            self._assign(queue, item)

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
    def worker_down(self, worker: WorkerState, gone: bool) -> None:
        """Membership took `worker` out of service: take back its queue and resend each request
        (see _resend); `gone`: its process or connection is known to be gone."""
        queue = self._queues.get(worker.worker_id)
        if queue is None or queue.worker is not worker:
            return  # it never had a queue, so it held nothing
        orphans, now = queue.take_all(), time.monotonic()
        if orphans:
            log.warning("resending %d requests of worker %s", len(orphans), worker.worker_id)
        for item in orphans:
            if gone:
                item.tried.append(queue)
            item.lost_at = now
            self._resend(item, counted=gone)
        self._check()

    def worker_up(self, worker: WorkerState) -> None:
        """A worker entered service: place every parked request again."""
        self.queue(worker)
        parked, self._parked = self._parked, []
        for item in parked:
            self._place(item)
        self._check()

    def hand_back(self, worker: WorkerState, request_ids: list[str]) -> None:
        """A draining worker returned these queued requests: place them elsewhere."""
        queue = self.queue(worker)
        for request_id in request_ids:
            item = queue.take(request_id)
            if item is not None and not item.future.done():
                self.counters["handed_back"] += 1
                item.tried.append(queue)
                self._place(item)
        self._check()

    def on_answer(self, identity: bytes, msg: Result | Error) -> None:
        """A worker's Result or Error: the first answer to a request wins."""
        item = self._inflight.get(msg.request_id)
        if item is None or item.future.done():
            return  # answered already, given up, or the client left
        owner = self._unplace(item)  # a late answer may find it parked
        sender = self.membership.sender(identity)
        answered_by = None if sender is None else self.queue(sender)
        if owner is not None and answered_by is not owner and owner.worker.state != "down":
            self.membership.send(owner.worker, Cancel(request_id=msg.request_id))  # an earlier holder was faster
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
        self._check()
