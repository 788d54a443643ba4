"""The gateway's side of the fleet: a ZeroMQ ROUTER, the workers it has heard from, and the
requests in flight on each.

Workers announce themselves (READY, then a HEARTBEAT every heartbeat_s carrying the same
facts), so membership needs no configuration: a worker that starts is used, a worker silent
for dead_after_s is taken out and its in-flight requests are sent to another worker. Requests
are pure reads, so sending one twice is safe; the first answer wins.
"""
from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field

import zmq
import zmq.asyncio

from gateway.routing import pick_worker
from shared.messages import Cancel, Drain, Error, Ready, Result, Score, decode, encode

log = logging.getLogger("jevfleet.fleet")


class NoWorker(Exception):
    """No live worker can take the request (→ 503)."""


class WorkerFailed(Exception):
    """The worker refused or could not answer the request."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass
class Inflight:
    score: Score
    tokens: int
    future: asyncio.Future[Result]
    worker_id: str = ""
    sends: int = 0


@dataclass
class WorkerState:
    worker_id: str
    identity: bytes
    pid: int
    cores: list[int]
    model: str
    model_sha256: str
    fingerprint: str
    last_seen: float
    up: bool = True
    stats: dict = field(default_factory=dict)
    inflight: dict[str, Inflight] = field(default_factory=dict)

    @property
    def queued_tokens(self) -> int:
        return sum(i.tokens for i in self.inflight.values())

    @property
    def queued_requests(self) -> int:
        return len(self.inflight)

    def describe(self) -> dict:
        return {
            "id": self.worker_id,
            "pid": self.pid,
            "cores": self.cores,
            "state": "up" if self.up else "down",
            "queued_tokens": self.queued_tokens,
            "queued_requests": self.queued_requests,
        }


class Fleet:
    def __init__(self, endpoint: str, *, heartbeat_s: float = 0.5, dead_after_s: float = 2.0) -> None:
        self.endpoint = endpoint
        self.heartbeat_s = heartbeat_s
        self.dead_after_s = dead_after_s
        self.workers: dict[str, WorkerState] = {}
        self._zctx = zmq.asyncio.Context()
        self._sock: zmq.asyncio.Socket | None = None
        self._tasks: list[asyncio.Task] = []

    # --- lifecycle ----------------------------------------------------------------------
    async def start(self) -> None:
        sock = self._zctx.socket(zmq.ROUTER)
        sock.setsockopt(zmq.ROUTER_HANDOVER, 1)  # a restarted worker takes over its identity
        sock.setsockopt(zmq.ROUTER_MANDATORY, 1)  # sending to a vanished worker raises
        sock.setsockopt(zmq.LINGER, 0)
        sock.bind(self.endpoint)
        self._sock = sock
        self._tasks = [asyncio.create_task(self._read_loop()), asyncio.create_task(self._watch_loop())]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._sock is not None:
            self._sock.close()
        self._zctx.term()

    # --- requests -----------------------------------------------------------------------
    async def submit(self, score: Score, tokens: int) -> Result:
        """Send to a worker and wait for its result; resent elsewhere if that worker dies."""
        item = Inflight(score=score, tokens=tokens, future=asyncio.get_running_loop().create_future())
        await self._dispatch(item)
        try:
            return await item.future
        finally:
            self._forget(item)

    async def cancel(self, request_id: str) -> None:
        for w in self.workers.values():
            item = w.inflight.pop(request_id, None)
            if item is not None:
                await self._send(w, Cancel(request_id=request_id))

    def _forget(self, item: Inflight) -> None:
        worker = self.workers.get(item.worker_id)
        if worker is not None:
            worker.inflight.pop(item.score.request_id, None)

    async def _dispatch(self, item: Inflight, exclude: frozenset[str] = frozenset()) -> None:
        while True:
            worker = pick_worker(self.workers.values(), exclude)
            if worker is None:
                if not item.future.done():
                    item.future.set_exception(NoWorker("no worker is available"))
                return
            self._forget(item)
            item.worker_id = worker.worker_id
            item.sends += 1
            worker.inflight[item.score.request_id] = item
            if await self._send(worker, item.score):
                return
            exclude = exclude | {worker.worker_id}

    async def _send(self, worker: WorkerState, msg) -> bool:
        try:
            await self._sock.send_multipart([worker.identity, encode(msg)])
            return True
        except zmq.ZMQError:  # the worker's connection is gone
            self._mark_down(worker, "unreachable")
            return False

    # --- membership ---------------------------------------------------------------------
    def _mark_down(self, worker: WorkerState, why: str) -> None:
        if not worker.up:
            return
        worker.up = False
        log.warning("worker %s (pid %d) down: %s; resending %d requests", worker.worker_id, worker.pid,
                    why, len(worker.inflight))
        orphans = list(worker.inflight.values())
        worker.inflight.clear()
        for item in orphans:
            asyncio.get_running_loop().create_task(self._dispatch(item, frozenset({worker.worker_id})))

    def _on_status(self, identity: bytes, msg: Ready) -> None:
        worker = self.workers.get(msg.worker_id)
        if worker is not None and worker.pid != msg.pid:
            self._mark_down(worker, f"replaced by pid {msg.pid}")
            worker = None
        if worker is None:
            worker = WorkerState(worker_id=msg.worker_id, identity=identity, pid=msg.pid, cores=msg.cores,
                                 model=msg.model, model_sha256=msg.model_sha256,
                                 fingerprint=msg.fingerprint, last_seen=time.monotonic())
            self.workers[msg.worker_id] = worker
            log.info("worker %s (pid %d, cores %s) joined", msg.worker_id, msg.pid, msg.cores)
        worker.identity = identity
        worker.last_seen = time.monotonic()
        worker.stats = msg.stats
        worker.up = True  # a worker that was silent and speaks again is back

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
                self._on_answer(msg)
            elif isinstance(msg, Drain):
                self._on_drain(msg)

    def _owner(self, request_id: str) -> tuple[WorkerState, Inflight] | None:
        for worker in self.workers.values():
            item = worker.inflight.get(request_id)
            if item is not None:
                return worker, item
        return None

    def _on_answer(self, msg: Result | Error) -> None:
        found = self._owner(msg.request_id)
        if found is None:
            return  # answered already, cancelled, or resent and answered elsewhere
        worker, item = found
        worker.inflight.pop(msg.request_id, None)
        if item.future.done():
            return
        if isinstance(msg, Result):
            item.future.set_result(msg)
        else:
            item.future.set_exception(WorkerFailed(msg.code, msg.message))

    def _on_drain(self, msg: Drain) -> None:
        worker = self.workers.get(msg.worker_id)
        if worker is None:
            return
        worker.up = False
        log.info("worker %s draining; resending %d queued requests", msg.worker_id, len(msg.request_ids))
        for request_id in msg.request_ids:
            item = worker.inflight.pop(request_id, None)
            if item is not None:
                asyncio.get_running_loop().create_task(self._dispatch(item, frozenset({worker.worker_id})))

    async def _watch_loop(self) -> None:
        while True:
            await asyncio.sleep(self.heartbeat_s / 2)
            now = time.monotonic()
            for worker in list(self.workers.values()):
                if worker.up and now - worker.last_seen > self.dead_after_s:
                    self._mark_down(worker, f"silent for {now - worker.last_seen:.1f}s")
