"""Which workers are in the fleet and in what state: up, draining, or down.

Workers announce themselves (READY, then a HEARTBEAT every heartbeat_s carrying the same facts),
so membership needs no configuration: a worker that starts and is admitted (gateway/admission.py)
is used. A worker is taken down when it is silent for dead_after_s, when a send to it fails, or
when its connection drops (the link's monitor reports a disconnect; a Ping to every worker then
fails for the one that is gone). A restart (same id, new pid) replaces the old incarnation, whose
late beats are ignored, once the old one is down; while it is up and heard within dead_after_s,
another process claiming its id is a duplicate: it is told Refuse (it exits 2) and listed in
/health, and the live worker keeps serving. Each worker process has an identity of its own on the
link (shared/messages.routing_identity), so both are heard.

Membership knows workers, not requests: what is queued where is placement's
(gateway/queues.py). It tells its listener of every change that matters to requests, and of
nothing else: `on_down` when a worker leaves service (placement takes back its queue) and
`on_up` when one enters it (placement places what is parked). Invariant: a worker's state
changes only here; each time it becomes "down" on_down is called once, and each time it becomes
"up" on_up is called once, as it happens. A failed send takes the worker down on a later turn of
the event loop, never inside the sender's call, so whoever sends is not re-entered by its own send.
"""
from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Callable

from gateway.admission import Admission
from gateway.link import Link
from shared.config import Settings
from shared.messages import Message, Ping, Ready, Refuse, WorkerStats

log = logging.getLogger("jevfleet.fleet")

PROBE_AFTER_S = (0.05, 0.2)  # a dropped connection leaves the ROUTER's table a moment later

OnDown = Callable[["WorkerState", bool], None]  # (the worker taken down, whether it is known gone)
OnUp = Callable[["WorkerState"], None]


@dataclass(eq=False)
class WorkerState:
    """One incarnation (id + pid) of a worker; a restart makes a new one. `status` is the last
    READY or HEARTBEAT it sent, what it says of itself; `state` is the gateway's verdict."""

    status: Ready
    identity: bytes
    last_seen: float
    state: str = "up"  # up | draining | down (and "new" until its first status is read)

    @property
    def worker_id(self) -> str:
        return self.status.worker_id

    @property
    def pid(self) -> int:
        return self.status.pid

    @property
    def cores(self) -> list[int]:
        return self.status.cores

    @property
    def stats(self) -> WorkerStats:
        return self.status.stats

    @property
    def up(self) -> bool:
        return self.state == "up"


class Membership:
    """The workers heard from, by id, and the sends to them (a failed send takes one down)."""

    def __init__(self, settings: Settings, link: Link, admission: Admission, *, on_down: OnDown,
                 on_up: OnUp) -> None:
        self.link = link
        self.admission = admission
        self.heartbeat_s = settings.heartbeat_s
        self.dead_after_s = settings.dead_after_s
        self.workers: dict[str, WorkerState] = {}
        self._gone: set[tuple[str, int]] = set()  # (id, pid) of replaced incarnations
        self._on_down = on_down
        self._on_up = on_up

    def up(self) -> list[WorkerState]:
        return [w for w in self.workers.values() if w.up]

    def sender(self, identity: bytes) -> WorkerState | None:
        """The member a message came from: the incarnation whose ROUTER identity it is (a
        replaced incarnation's late messages come from no member)."""
        return next((w for w in self.workers.values() if w.identity == identity), None)

    def send(self, worker: WorkerState, msg: Message) -> bool:
        """Send without waiting; False if it cannot be reached, and then the worker is taken
        down on the loop's next turn (not inside this call: the module's invariant)."""
        loop = asyncio.get_running_loop()
        return self.link.send(worker.identity, msg,
                              lambda exc: loop.call_soon(self.mark_down, worker, f"unreachable ({exc})"))

    def mark_down(self, worker: WorkerState, why: str, *, gone: bool = True) -> None:
        """Take a worker out of service and tell on_down; `gone`: its process or connection is
        known to be gone (False: it is only silent)."""
        if worker.state == "down":
            return
        worker.state = "down"
        log.warning("worker %s (pid %d) down: %s", worker.worker_id, worker.pid, why)
        self._on_down(worker, gone)

    def on_status(self, identity: bytes, msg: Ready) -> None:
        """A READY or HEARTBEAT: admit, refresh, or replace the sender."""
        if (msg.worker_id, msg.pid) in self._gone:
            return  # a late beat of an incarnation already replaced
        worker = self.workers.get(msg.worker_id)
        if worker is not None and worker.identity != identity and self._holds(worker):
            reason = self.admission.duplicate(msg, holder_pid=worker.pid)
            self.link.send(identity, Refuse(reason=reason), lambda exc: None)  # gone already: nothing to tell
            return
        if worker is not None and worker.pid != msg.pid:
            self._gone.add((worker.worker_id, worker.pid))
            self.mark_down(worker, f"restarted as pid {msg.pid}")
            worker = None
        if worker is None and not self.admission.admits(msg):
            return
        if worker is None:
            worker = WorkerState(status=msg, identity=identity, last_seen=time.monotonic(), state="new")
            self.workers[msg.worker_id] = worker
            log.info("worker %s (pid %d, cores %s) joined", msg.worker_id, msg.pid, msg.cores)
        worker.status = msg
        worker.identity = identity
        worker.last_seen = time.monotonic()
        was = worker.state
        worker.state = "draining" if msg.draining or was == "draining" else "up"
        if worker.up and was != "up":
            if was == "down":
                log.info("worker %s (pid %d) is back", worker.worker_id, worker.pid)
            self._on_up(worker)

    def _holds(self, worker: WorkerState) -> bool:
        """Whether a worker still holds its id: in service and heard within dead_after_s. A
        restarted worker finds its dead predecessor down already (its connection closed, or it
        fell silent), since it connects only once its model is loaded."""
        return worker.state != "down" and time.monotonic() - worker.last_seen <= self.dead_after_s

    def draining(self, identity: bytes) -> WorkerState | None:
        """A worker said it drains: it gets no new work (a down one stays down). Only a member's
        own incarnation can say so, not a process that merely claims its id."""
        worker = self.sender(identity)
        if worker is not None and worker.state != "down":
            worker.state = "draining"
        return worker

    async def watch_silence(self) -> None:
        """Take down every worker silent for longer than dead_after_s."""
        while True:
            await asyncio.sleep(self.heartbeat_s / 2)
            now = time.monotonic()
            for worker in list(self.workers.values()):
                if worker.state != "down" and now - worker.last_seen > self.dead_after_s:
                    self.mark_down(worker, f"silent for {now - worker.last_seen:.1f}s", gone=False)

    async def probe_on_disconnect(self) -> None:
        """On a dropped connection, ping every live worker: the send fails for the gone one."""
        while True:
            await self.link.disconnected()
            for delay in PROBE_AFTER_S:
                await asyncio.sleep(delay)
                for worker in list(self.workers.values()):
                    if worker.state != "down":
                        self.send(worker, Ping())
