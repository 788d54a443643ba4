"""The gateway's side of the fleet: the parts wired together, and the loops that drive them.

gateway/link.py carries frames (the ROUTER and its monitor), gateway/membership.py knows the
workers (heartbeats, admission, loss), gateway/placement.py knows the requests and the queues
they wait in (routing, parking, resend). Invariant: every message from a worker reaches exactly
one of them, by its type (a status to membership, an answer to placement, a drain to both, a
worker that cannot start to admission);
membership reports each worker that leaves or enters service to placement, which takes back or
fills its queue and owes each request an answer. Membership never sees a request, and neither
module imports the other's caller.
"""
from __future__ import annotations

import asyncio
import logging
from typing import Any, Callable, KeysView

from gateway.admission import Admission
from gateway.capacity import Limits, Unavailable
from gateway.link import Link
from gateway.membership import Membership, WorkerState
from gateway.placement import Placement, WorkerFailed
from gateway.queues import WorkerQueue
from shared.config import Settings
from shared.messages import CannotStart, Drain, Error, Heartbeat, Message, Ready, Result, Score

__all__ = ["Fleet", "Unavailable", "WorkerFailed"]

log = logging.getLogger("jevfleet.fleet")


class Fleet:
    """What the request path and /health see: submit a Score, get a Result or Unavailable."""

    def __init__(self, settings: Settings, *, preamble_tokens: int = 0, serves: dict[str, str] | None = None) -> None:
        """preamble_tokens: how many tokens every prompt starts with that each worker keeps;
        serves: the gateway's serving facts, which a worker must state to be admitted."""
        self.settings = settings
        self.endpoint = settings.zmq_endpoint
        self.link = Link(settings)
        self.membership = Membership(settings, self.link, Admission(serves, settings.fleet_arithmetic), on_down=self._down, on_up=self._up)
        limits = Limits(queue_tokens=settings.queue_tokens, queue_requests=settings.queue_requests,
                        affinity_slack_tokens=settings.affinity_slack_tokens)
        self.placement = Placement(self.membership, limits, preamble_tokens=preamble_tokens,
                                   affinity_memory=settings.affinity_memory, check=bool(settings.check_lifecycle))
        self._tasks: list[asyncio.Task] = []

    @property
    def workers(self) -> dict[str, WorkerState]:
        """Every worker heard from and admitted, by id: who is up (membership's)."""
        return self.membership.workers

    @property
    def queues(self) -> dict[str, WorkerQueue]:
        """Each of those workers' queue and the gateway's measures of it (placement's)."""
        return self.placement.queues()

    @property
    def admission(self) -> Admission:
        return self.membership.admission

    @property
    def counters(self) -> dict[str, int]:
        return self.placement.counters

    @property
    def inflight_ids(self) -> KeysView[str]:
        return self.placement.inflight_ids

    async def start(self) -> None:
        self.link.open()
        self._tasks = [asyncio.create_task(self._read_loop()),
                       asyncio.create_task(self.membership.watch_silence()),
                       asyncio.create_task(self.membership.probe_on_disconnect())]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self.placement.abandon_all("the gateway is stopping")
        self.link.close()

    def describe(self) -> dict:
        """Fleet-wide counters for /health, and the arithmetic every member has (gateway/admission.py)."""
        return {**self.placement.describe(), "arithmetic": self.admission.arithmetic or None,
                "arithmetic_from": self.admission.arithmetic_from or None}

    async def submit(self, score: Score) -> Result:
        """Send to a worker and wait for its result (gateway/placement.py)."""
        return await self.placement.submit(score)

    def refusal_when_full(self, reserved: int = 0) -> Unavailable | None:
        """The 429 the door answers before reading a body, if every queue is full."""
        return self.placement.refusal_when_full(reserved)

    def _down(self, worker: WorkerState, gone: bool) -> None:
        self.placement.worker_down(worker, gone)

    def _up(self, worker: WorkerState) -> None:
        self.placement.worker_up(worker)

    def _on_drain(self, identity: bytes, msg: Drain) -> None:
        worker = self.membership.draining(identity)
        if worker is None:
            return
        log.info("worker %s draining; placing %d queued requests again", msg.worker_id, len(msg.request_ids))
        self.placement.hand_back(worker, msg.request_ids)

    async def _read_loop(self) -> None:
        handlers: dict[type[Message], Callable[[bytes, Any], None]] = {
            Ready: self.membership.on_status, Heartbeat: self.membership.on_status,
            Result: self.placement.on_answer, Error: self.placement.on_answer,
            Drain: self._on_drain, CannotStart: lambda _, msg: self.admission.cannot_start(msg),
        }
        while True:
            identity, msg = await self.link.receive()
            handler = handlers.get(type(msg))
            if handler is None:
                log.warning("ignored a %s from %r, which only the gateway sends", type(msg).__name__, identity)
            else:
                handler(identity, msg)
