"""Which workers are in the fleet and in what state: up, draining, or down.

Workers announce themselves (READY, then a HEARTBEAT every heartbeat_s carrying the same facts),
so membership needs no configuration: a worker that starts and is admitted (gateway/admission.py)
is used. A worker is taken down when it is silent for dead_after_s, when a send to it fails, or
when its connection drops (the link's monitor reports a disconnect; a Ping to every worker then
fails for the one that is gone). A restart (same id, new pid) replaces the old incarnation, whose
late beats are ignored.

Invariant: a worker that is down holds no requests. Taking it down empties its queue and hands
those requests to `on_lost` (placement resends them); a worker coming up calls `on_back`
(placement places the parked requests).
"""
from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable

import msgspec

from gateway.admission import Admission
from gateway.capacity import TokenRate
from gateway.link import Link
from gateway.routing import PrefixMemory
from shared.config import Settings
from shared.messages import Message, Ping, Ready, WorkerStats

if TYPE_CHECKING:
    from gateway.placement import Inflight

log = logging.getLogger("jevfleet.fleet")

PROBE_AFTER_S = (0.05, 0.2)  # a dropped connection leaves the ROUTER's table a moment later

# (the worker taken down, the requests it held, whether it is known to be gone)
OnLost = Callable[["WorkerState", list["Inflight"], bool], None]


@dataclass(eq=False)
class WorkerState:
    """One incarnation (id + pid) of a worker; a restart makes a new one. `status` is the last
    READY or HEARTBEAT it sent, what it says of itself; the other fields are the gateway's view."""

    status: Ready
    identity: bytes
    last_seen: float
    memory: PrefixMemory
    state: str = "up"  # up | draining | down (and "new" until its first status is read)
    inflight: dict[str, Inflight] = field(default_factory=dict)  # its queue, by request id
    served: int = 0
    last_sent: float = 0.0
    rate: TokenRate | None = None

    def __post_init__(self) -> None:
        self.rate = self.rate or TokenRate(len(self.cores))

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
        return key in self.status.snapshot_keys or key in self.memory

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
            "stats": msgspec.to_builtins(self.stats),
        }


class Membership:
    """The workers heard from, by id, and the sends to them (a failed send takes one down)."""

    def __init__(self, settings: Settings, link: Link, admission: Admission, *, on_lost: OnLost,
                 on_back: Callable[[], None]) -> None:
        self.settings = settings
        self.link = link
        self.admission = admission
        self.heartbeat_s = settings.heartbeat_s
        self.dead_after_s = settings.dead_after_s
        self.workers: dict[str, WorkerState] = {}
        self._gone: set[tuple[str, int]] = set()  # (id, pid) of replaced incarnations
        self._on_lost = on_lost
        self._on_back = on_back

    def up(self) -> list[WorkerState]:
        return [w for w in self.workers.values() if w.up]

    def sender(self, identity: bytes) -> WorkerState | None:
        """The member a message came from (a worker's ROUTER identity is its id)."""
        return self.workers.get(identity.decode("utf-8", "replace"))

    def send(self, worker: WorkerState, msg: Message) -> bool:
        """Send without waiting; False (and the worker taken down) if it cannot be reached."""
        return self.link.send(worker.identity, msg, lambda exc: self.mark_down(worker, f"unreachable ({exc})"))

    def mark_down(self, worker: WorkerState, why: str, *, gone: bool = True) -> None:
        """Take a worker out of service and hand its requests to on_lost; `gone`: its process
        or connection is known to be gone (False: it is only silent)."""
        if worker.state == "down":
            return
        worker.state = "down"
        orphans = list(worker.inflight.values())
        worker.inflight.clear()
        log.warning("worker %s (pid %d) down: %s; resending %d requests", worker.worker_id, worker.pid,
                    why, len(orphans))
        self._on_lost(worker, orphans, gone)

    def on_status(self, identity: bytes, msg: Ready) -> None:
        """A READY or HEARTBEAT: admit, refresh, or replace the sender."""
        if (msg.worker_id, msg.pid) in self._gone:
            return  # a late beat of an incarnation already replaced
        worker = self.workers.get(msg.worker_id)
        if worker is not None and worker.pid != msg.pid:
            self._gone.add((worker.worker_id, worker.pid))
            self.mark_down(worker, f"restarted as pid {msg.pid}")
            worker = None
        if worker is None and not self.admission.admits(msg):
            return
        if worker is None:
            worker = WorkerState(status=msg, identity=identity, last_seen=time.monotonic(),
                                 memory=PrefixMemory(self.settings.affinity_memory), state="new")
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
            self._on_back()

    def draining(self, worker_id: str) -> WorkerState | None:
        """A worker said it drains: it gets no new work (a down one stays down)."""
        worker = self.workers.get(worker_id)
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
