"""The gateway's side of the fleet: a ZeroMQ ROUTER, the workers it has heard from, and the
requests in flight on each.

Workers announce themselves (READY, then a HEARTBEAT every heartbeat_s carrying the same
facts), so membership needs no configuration: a worker that starts is used, and a worker is
taken out when it is silent for dead_after_s or when its connection drops (the ROUTER's monitor
reports a disconnect; a Ping to every worker then fails for the one that is gone). Its requests
are sent once to another worker; requests are pure reads, so that is safe, and the first
answer wins. An accepted request nobody can take waits (parked) for a worker until its
deadline. A worker that drains hands its queue back, and those requests are placed again.
"""
from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from typing import KeysView

import zmq
import zmq.asyncio

from gateway.admission import Admission
from gateway.capacity import Limits, TokenRate, fits, retry_after_s
from gateway.routing import PrefixMemory, Work, choose
from shared import curve
from shared.config import Settings
from shared.messages import Cancel, Drain, Error, Message, Ping, Ready, Result, Score, decode, encode, prefix_key

log = logging.getLogger("jevfleet.fleet")

RESENDS = 1  # a request whose worker was lost is sent again once
NO_WORKER_RETRY_S = 2  # Retry-After while no worker is up: a restart takes a few seconds
PROBE_AFTER_S = (0.05, 0.2)  # a dropped connection leaves the ROUTER's table a moment later


class Unavailable(Exception):
    """The request is not served now: 429 (every queue is full) or 503 (no worker is up, its
    deadline passed, or it was lost with two workers); retry_after in whole seconds."""

    def __init__(self, status: int, message: str, retry_after: int) -> None:
        super().__init__(message)
        self.status = status
        self.retry_after = retry_after


class WorkerFailed(Exception):
    """The worker could not answer the request (an engine fault)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(eq=False)
class WorkerState:
    """One incarnation (id + pid) of a worker; a restart makes a new one."""

    worker_id: str
    identity: bytes
    pid: int
    cores: list[int]
    model: str
    model_sha256: str
    fingerprint: str
    last_seen: float
    memory: PrefixMemory
    state: str = "up"  # up | draining | down
    stats: dict = field(default_factory=dict)
    snapshot_keys: frozenset[str] = frozenset()
    inflight: dict[str, Inflight] = field(default_factory=dict)
    served: int = 0
    last_sent: float = 0.0
    rate: TokenRate | None = None

    def __post_init__(self) -> None:
        self.rate = self.rate or TokenRate(len(self.cores))

    @property
    def up(self) -> bool:
        return self.state == "up"

    routable = up

    @property
    def queued_tokens(self) -> int:
        return sum(i.work.prompt for i in self.inflight.values())

    @property
    def queued_reads(self) -> int:
        return sum(i.cost for i in self.inflight.values())

    @property
    def queued_requests(self) -> int:
        return len(self.inflight)

    @property
    def tokens_per_s(self) -> float:
        return self.rate.value

    def holds(self, key: str) -> bool:
        return key in self.snapshot_keys or key in self.memory

    def describe(self) -> dict:
        return {
            "id": self.worker_id,
            "pid": self.pid,
            "cores": self.cores,
            "state": self.state,
            "queued_tokens": self.queued_tokens,
            "queued_reads": self.queued_reads,
            "queued_requests": self.queued_requests,
            "served": self.served,
            "tokens_per_s": round(self.tokens_per_s, 1),
            "stats": self.stats,
        }


@dataclass(eq=False)
class Inflight:
    score: Score
    work: Work
    future: asyncio.Future[Result]
    cost: int = 0  # work.cost(worker) when it was assigned: its share of that worker's queue
    worker: WorkerState | None = None
    resends: int = 0
    lost_at: float = 0.0  # when a worker holding it was lost (monotonic), for the log
    tried: list[WorkerState] = field(default_factory=list)  # incarnations that lost or returned it


class Fleet:
    def __init__(self, settings: Settings, *, preamble_tokens: int = 0, serves: dict[str, str] | None = None) -> None:
        """preamble_tokens: how many tokens every prompt starts with that each worker keeps;
        serves: the gateway's serving facts, which a worker must state to be admitted."""
        self.settings = settings
        self.admission = Admission(serves)
        self.preamble_tokens = preamble_tokens
        self.endpoint = settings.zmq_endpoint
        self.heartbeat_s = settings.heartbeat_s
        self.dead_after_s = settings.dead_after_s
        self.limits = Limits(queue_tokens=settings.queue_tokens, queue_requests=settings.queue_requests,
                             affinity_slack_tokens=settings.affinity_slack_tokens)
        self.workers: dict[str, WorkerState] = {}
        self.counters = {"resent": 0, "handed_back": 0, "refused": 0, "expired": 0, "cancelled": 0}
        self._inflight: dict[str, Inflight] = {}
        self._parked: list[Inflight] = []
        self._gone: set[tuple[str, int]] = set()  # (id, pid) of replaced incarnations
        self._keys = curve.gateway_keys(settings)  # raises CurveError now, not at the first worker
        self._zctx = zmq.asyncio.Context()
        self._sock: zmq.asyncio.Socket | None = None
        self._monitor: zmq.asyncio.Socket | None = None
        self._auth = None
        self._tasks: list[asyncio.Task] = []

    # --- lifecycle ----------------------------------------------------------------------
    async def start(self) -> None:
        sock = self._zctx.socket(zmq.ROUTER)
        sock.setsockopt(zmq.ROUTER_HANDOVER, 1)  # a restarted worker takes over its identity
        sock.setsockopt(zmq.ROUTER_MANDATORY, 1)  # sending to a vanished worker raises
        sock.setsockopt(zmq.LINGER, 0)
        if self._keys is not None:
            self._keys.apply(sock)
            self._auth = curve.authenticator(self._zctx, self.settings)
        self._monitor = sock.get_monitor_socket(zmq.EVENT_DISCONNECTED)
        sock.bind(self.endpoint)
        self._sock = sock
        self._tasks = [asyncio.create_task(self._read_loop()), asyncio.create_task(self._watch_loop()),
                       asyncio.create_task(self._monitor_loop())]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for item in list(self._inflight.values()):
            if not item.future.done():
                item.future.set_exception(Unavailable(503, "the gateway is stopping", NO_WORKER_RETRY_S))
        if self._sock is not None:
            self._sock.disable_monitor()
            self._monitor.close(linger=0)
            self._sock.close()
        if self._auth is not None:
            self._auth.stop()
        self._zctx.term()

    def describe(self) -> dict:
        """Fleet-wide counters for /health."""
        return {**self.counters, "inflight": len(self._inflight), "parked": len(self._parked)}

    # --- requests -----------------------------------------------------------------------
    @property
    def inflight_ids(self) -> KeysView[str]:
        return self._inflight.keys()

    def work(self, score: Score) -> Work:
        questions = sum(len(s) for s in score.suffixes)
        state = max(0, len(score.prefix) - self.preamble_tokens)
        return Work(key=prefix_key(score.prefix), prompt=len(score.prefix) + questions, cold=state + questions,
                    warm=questions)

    async def submit(self, score: Score) -> Result:
        """Send to a worker and wait for its result, resent elsewhere if that worker is lost.
        Raises Unavailable at once when no worker can take it (429/503), or at its deadline."""
        work = self.work(score)
        worker = choose(self.workers.values(), work, limits=self.limits)
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
        """A 429 for any request, if workers are up but none could take even the smallest one,
        or every free place is `reserved` by requests on their way to a queue (a burst).
        (With no worker up the request path answers: 422 for bad input, else 503.)"""
        up = [w for w in self.workers.values() if w.up]
        free = sum(max(0, self.limits.queue_requests - w.queued_requests) for w in up)
        if not up or (any(fits(w, 1, self.limits) for w in up) and free > reserved):
            return None
        return self._refusal(1)

    def _refusal(self, tokens: int) -> Unavailable:
        up = [w for w in self.workers.values() if w.up]
        if not up:
            return Unavailable(503, "no worker is available", NO_WORKER_RETRY_S)
        self.counters["refused"] += 1
        return Unavailable(429, "every worker's queue is full", retry_after_s(up, tokens, self.limits))

    def _past_deadline(self, item: Inflight) -> None:
        """A request still waiting at its deadline gets 503: at once if it is parked; if it is
        on a worker, that worker is told to drop it and answers "cancelled" if it had not
        started it. A request a worker is already reading is allowed to finish."""
        if item.future.done():
            return
        if item.worker is None:
            self._expire(item)
        else:
            self._send(item.worker, Cancel(request_id=item.score.request_id))

    def _expire(self, item: Inflight) -> None:
        self.counters["expired"] += 1
        item.future.set_exception(Unavailable(503, "the request waited past its deadline",
                                              self._retry_after(item.work.cold)))

    def _retry_after(self, tokens: int) -> int:
        up = [w for w in self.workers.values() if w.up]
        return retry_after_s(up, tokens, self.limits) if up else NO_WORKER_RETRY_S

    def _assign(self, worker: WorkerState, item: Inflight) -> None:
        item.worker = worker
        item.cost = item.work.cost(worker)
        worker.inflight[item.score.request_id] = item
        worker.memory.touch(item.work.key)
        worker.last_sent = time.monotonic()
        self._send(worker, item.score)  # if that fails, the worker is marked down and the item resent

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
                self._send(worker, Cancel(request_id=rid))

    def _place(self, item: Inflight) -> None:
        """Send an accepted request to the best routable worker that has not already lost or
        returned it, queue limits ignored (it is owed an answer, not a 429); park it if none."""
        item.worker = None
        if item.score.deadline <= time.time():  # a worker would only answer "expired"
            self._expire(item)
            return
        worker = choose(self.workers.values(), item.work, limits=self.limits, exclude=item.tried,
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

    def _unpark(self) -> None:
        parked, self._parked = self._parked, []
        for item in parked:
            self._place(item)

    def _send(self, worker: WorkerState, msg: Message) -> bool:
        """Send without waiting; False (and the worker marked down) if ZeroMQ refused it: the
        ROUTER refuses a peer whose connection is gone, or whose queue is full (stuck)."""
        fut = self._sock.send_multipart([worker.identity, encode(msg)], flags=zmq.NOBLOCK)
        if not fut.done():  # behind an earlier pending send
            fut.add_done_callback(lambda f: f.cancelled() or f.exception() is None
                                  or self._mark_down(worker, f"unreachable ({f.exception()})"))
            return True
        if fut.exception() is None:
            return True
        self._mark_down(worker, f"unreachable ({fut.exception()})")
        return False

    # --- membership ---------------------------------------------------------------------
    def _mark_down(self, worker: WorkerState, why: str, *, gone: bool = True) -> None:
        """Take a worker out of service and resend its requests; `gone`: its process or
        connection is known to be gone (False: it is only silent)."""
        if worker.state == "down":
            return
        worker.state = "down"
        orphans = list(worker.inflight.values())
        worker.inflight.clear()
        log.warning("worker %s (pid %d) down: %s; resending %d requests", worker.worker_id, worker.pid,
                    why, len(orphans))
        now = time.monotonic()
        for item in orphans:
            if gone:
                item.tried.append(worker)
            item.lost_at = now
            self._resend(item, counted=gone)

    def _on_status(self, identity: bytes, msg: Ready) -> None:
        if (msg.worker_id, msg.pid) in self._gone:
            return  # a late beat of an incarnation already replaced
        worker = self.workers.get(msg.worker_id)
        if worker is not None and worker.pid != msg.pid:
            self._gone.add((worker.worker_id, worker.pid))
            self._mark_down(worker, f"restarted as pid {msg.pid}")
            worker = None
        if worker is None and not self.admission.admits(msg):
            return
        if worker is None:
            worker = WorkerState(worker_id=msg.worker_id, identity=identity, pid=msg.pid, cores=msg.cores,
                                 model=msg.model, model_sha256=msg.model_sha256, fingerprint=msg.fingerprint,
                                 last_seen=time.monotonic(), memory=PrefixMemory(self.settings.affinity_memory),
                                 state="new")
            self.workers[msg.worker_id] = worker
            log.info("worker %s (pid %d, cores %s) joined", msg.worker_id, msg.pid, msg.cores)
        worker.identity = identity
        worker.last_seen = time.monotonic()
        worker.stats = msg.stats
        worker.snapshot_keys = frozenset(msg.snapshot_keys)
        was = worker.state
        worker.state = "draining" if msg.draining or was == "draining" else "up"
        if worker.up and was != "up":
            if was == "down":
                log.info("worker %s (pid %d) is back", worker.worker_id, worker.pid)
            self._unpark()

    def _on_answer(self, identity: bytes, msg: Result | Error) -> None:
        item = self._inflight.get(msg.request_id)
        if item is None or item.future.done():
            return  # answered already, given up, or the client left
        owner = item.worker
        if owner is not None:
            owner.inflight.pop(msg.request_id, None)
        answered_by = self.workers.get(identity.decode("utf-8", "replace"))
        if owner is not None and answered_by is not owner and owner.state != "down":
            self._send(owner, Cancel(request_id=msg.request_id))  # an earlier holder was faster
        if isinstance(msg, Result):
            if answered_by is not None:
                answered_by.served += 1
                answered_by.rate.add(msg.read_tokens, msg.run_ms / 1000)  # new tokens, like Work
            if item.lost_at:
                log.info("request %s re-served %.0f ms after its worker was lost", msg.request_id,
                         (time.monotonic() - item.lost_at) * 1000)
            item.future.set_result(msg)
        elif msg.code == "draining":  # it reached a worker that had started to drain
            if owner is not None:
                item.tried.append(owner)
            self._place(item)
        elif msg.code in ("expired", "cancelled"):  # dropped unread at or past its deadline
            self._expire(item)
        else:
            item.future.set_exception(WorkerFailed(msg.code, msg.message))

    def _on_drain(self, msg: Drain) -> None:
        worker = self.workers.get(msg.worker_id)
        if worker is None:
            return
        if worker.state != "down":
            worker.state = "draining"
        log.info("worker %s draining; placing %d queued requests again", msg.worker_id, len(msg.request_ids))
        for request_id in msg.request_ids:
            item = worker.inflight.pop(request_id, None)
            if item is not None and not item.future.done():
                self.counters["handed_back"] += 1
                item.tried.append(worker)
                self._place(item)

    # --- loops --------------------------------------------------------------------------
    async def _read_loop(self) -> None:
        while True:
            identity, frame = (await self._sock.recv_multipart())[-2:]
            try:
                msg = decode(frame)
            except ValueError as exc:
                log.warning("dropped a bad frame: %s", exc)
                continue
            if isinstance(msg, Ready):  # Heartbeat is a Ready
                self._on_status(identity, msg)
            elif isinstance(msg, (Result, Error)):
                self._on_answer(identity, msg)
            elif isinstance(msg, Drain):
                self._on_drain(msg)

    async def _watch_loop(self) -> None:
        while True:
            await asyncio.sleep(self.heartbeat_s / 2)
            now = time.monotonic()
            for worker in list(self.workers.values()):
                if worker.state != "down" and now - worker.last_seen > self.dead_after_s:
                    self._mark_down(worker, f"silent for {now - worker.last_seen:.1f}s", gone=False)

    async def _monitor_loop(self) -> None:
        """On a dropped connection, ping every live worker: the send fails for the gone one."""
        while True:
            await self._monitor.recv_multipart()
            for delay in PROBE_AFTER_S:
                await asyncio.sleep(delay)
                for worker in list(self.workers.values()):
                    if worker.state != "down":
                        self._send(worker, Ping())
