"""The faults of the chaos run, injected one at a time into the fleet of chaos_fleet.py.

Each fault is done the way it happens in production, to processes and links the run started:
a worker or a gateway killed with SIGKILL (supervisord restarts it), a worker stopped with
SIGTERM by `supervisorctl restart` (it drains, exits 0 and is started again, as an operator
restarts one), a worker frozen with SIGSTOP for longer than dead_after_s and then continued, the
worker host's link taken down and brought back up, and a client that closes its connection to a
gateway before the answer. Victims, stall and cut lengths come from the run's seeded random.

For each fault: when its effect was seen (the gateway saw the worker gone, a new pid serving,
...), and when the fleet was whole again (chaos_fleet.ChaosFleet.missing() empty), both counted
from the moment it was injected.
"""
from __future__ import annotations

import os
import random
import re
import signal
import time
from dataclasses import dataclass
from typing import Callable

from jevfleet.harness import netns
from jevfleet.harness.chaos_clients import Clients
from jevfleet.harness.chaos_fleet import ADDRESSES, GATEWAYS, LINK_HOST, WORKER_PROGRAM, WORKERS, ChaosFleet

KINDS = ("worker kill -9", "worker SIGTERM (drain)", "gateway kill -9", "worker SIGSTOP/SIGCONT", "link cut",
         "client disconnect")
WHOLE_TIMEOUT_S = 180.0  # a fault the fleet has not recovered from by then is reported as such
SEEN_TIMEOUT_S = 30.0
DROPPED = re.compile(r"gateway connection lost; dropped (\d+) queued")
MOVED = ("resent", "handed_back", "expired", "cancelled")  # /health fleet counters reported per fault
POLL_S = 0.1


@dataclass
class Fault:
    kind: str
    target: str
    at_s: float  # into the chaos phase
    seen_s: float | None = None  # its effect seen (see each injector), after injection
    restored_s: float | None = None  # stall or cut ended (SIGCONT, link up), after injection
    whole_s: float | None = None  # the fleet whole again, after injection; None: not within WHOLE_TIMEOUT_S
    gateway: str = ""  # whose /health counters tell of the fault ("" for a gateway's own death: they restart)
    moved: dict[str, int] | None = None  # those counters meanwhile: requests resent, handed back, cancelled, ...
    note: str = ""


def within(condition: Callable[[], object], timeout: float) -> float | None:
    """Poll `condition` until it holds: the seconds it took, or None after `timeout`."""
    start = time.monotonic()
    while True:
        if condition():
            return time.monotonic() - start
        if time.monotonic() - start >= timeout:
            return None
        time.sleep(POLL_S)


class Injector:
    def __init__(self, fleet: ChaosFleet, clients: Clients, rng: random.Random, dead_after_s: float,
                 started: float) -> None:
        self.fleet, self.clients, self.rng = fleet, clients, rng
        self.dead_after_s = dead_after_s
        self.started = started  # time.monotonic() of the chaos phase's start
        self.doers: dict[str, Callable[[Fault, float], None]] = dict(zip(KINDS, (
            self._worker_kill, self._worker_term, self._gateway_kill, self._worker_stall, self._link_cut,
            self._disconnect)))

    def inject(self, kind: str) -> Fault:
        """Do one fault of `kind`, then wait (at most WHOLE_TIMEOUT_S) for the fleet to be whole."""
        before = self.fleet.fleet_counters()
        drops = {wid: self._connection_drops(wid) for wid in WORKERS}
        at = time.monotonic()
        fault = Fault(kind, "", round(at - self.started, 1))
        self.doers[kind](fault, at)
        whole = within(lambda: not self.fleet.missing(), WHOLE_TIMEOUT_S)
        fault.whole_s = None if whole is None else time.monotonic() - at
        if whole is None:
            fault.note += f"; still missing: {self.fleet.missing()}"
        if fault.target in WORKERS:
            fault.gateway = WORKERS[fault.target][1]
            if new := self._connection_drops(fault.target)[len(drops[fault.target]):]:
                fault.note += f"; the worker saw its connection drop and dropped {sum(new)} queued requests"
        if fault.gateway:
            was, now = before[fault.gateway], self.fleet.fleet_counters()[fault.gateway]
            fault.moved = {k: now[k] - was.get(k, 0) for k in MOVED if now.get(k, 0) > was.get(k, 0)}
        return fault

    def _connection_drops(self, wid: str) -> list[int]:
        """Each time the worker logged that its gateway connection dropped: the queued requests
        it dropped then (worker/process.py)."""
        log = self.fleet.hosts.tmp / WORKERS[wid][0] / "worker_00.log"
        return [int(n) for n in DROPPED.findall(log.read_text())] if log.exists() else []

    def _since(self, at: float, waited: float | None) -> float | None:
        return None if waited is None else time.monotonic() - at

    def _worker_kill(self, fault: Fault, at: float) -> None:
        wid = fault.target = self.rng.choice(sorted(WORKERS))
        pid = self.fleet.worker_pid(wid)
        os.kill(pid, signal.SIGKILL)
        # seen: its gateway took it out (state down) or already serves its successor
        fault.seen_s = self._since(at, within(lambda: (w := self.fleet.worker_state(wid)).get("state") != "up"
                                              or w.get("pid") != pid, SEEN_TIMEOUT_S))

    def _worker_term(self, fault: Fault, at: float) -> None:
        wid = fault.target = self.rng.choice(sorted(WORKERS))
        serve = WORKERS[wid][0]
        log = self.fleet.hosts.tmp / serve / "supervisord.log"
        clean = f"stopped: {WORKER_PROGRAM.split(':')[1]} (exit status 0)"
        before = log.read_text().count(clean)
        out = self.fleet.hosts.supervisorctl(serve, "restart", WORKER_PROGRAM)  # SIGTERM, wait for exit, start
        fault.seen_s = time.monotonic() - at  # drained, exited and started again
        fault.note = "drained, exit 0" if log.read_text().count(clean) > before else f"not a clean exit: {out.strip()}"

    def _gateway_kill(self, fault: Fault, at: float) -> None:
        host = fault.target = self.rng.choice(sorted(GATEWAYS))
        pid = self.fleet.gateway_pid(host)
        os.kill(pid, signal.SIGKILL)
        fault.seen_s = self._since(at, within(lambda: self.fleet.gateway_pid(host) not in (0, pid), SEEN_TIMEOUT_S))

    def _worker_stall(self, fault: Fault, at: float) -> None:
        wid = fault.target = self.rng.choice(sorted(WORKERS))
        stall = self.dead_after_s + self.rng.uniform(0.5, 2.0)
        pid = self.fleet.worker_pid(wid)
        os.kill(pid, signal.SIGSTOP)
        try:
            out = within(lambda: self.fleet.worker_state(wid).get("state") != "up", stall)
        finally:
            time.sleep(max(0.0, at + stall - time.monotonic()))  # the stall's length, not a wait for anything
            os.kill(pid, signal.SIGCONT)
        fault.restored_s = time.monotonic() - at
        fault.seen_s = out
        # back: the same process up again at its gateway
        within(lambda: (w := self.fleet.worker_state(wid)).get("state") == "up" and w.get("pid") == pid,
               SEEN_TIMEOUT_S)
        fault.note = f"stalled {stall:.1f} s; " + ("taken out of service" if out is not None else "never taken out")

    def _link_cut(self, fault: Fault, at: float) -> None:
        host = LINK_HOST
        wid = fault.target = next(w for w in WORKERS if w.startswith(f"host{host}/"))
        cut = self.dead_after_s + self.rng.uniform(1.0, 3.0)
        self.fleet.hosts.set_link(host, up=False)
        try:
            out = within(lambda: self.fleet.worker_state(wid).get("state") == "down", cut)
        finally:
            time.sleep(max(0.0, at + cut - time.monotonic()))  # the cut's length
            self.fleet.hosts.set_link(host, up=True)
        fault.restored_s = time.monotonic() - at
        fault.seen_s = out
        fault.note = f"cut {cut:.1f} s; " + ("taken out of service" if out is not None else "never taken out")

    def _disconnect(self, fault: Fault, at: float) -> None:
        req = self.rng.choice(self.clients.reqs)
        host = self.rng.choice(sorted(GATEWAYS))
        after = self.rng.uniform(0.05, 0.5)
        fault.target, fault.gateway = f"request {req.index} at gateway {host}", host
        mid = netns.run_in(self.fleet.hosts.ns("a"), lambda: self.clients.disconnect(
            req, ADDRESSES[host], self.fleet.hosts.http_port, after))
        fault.seen_s = time.monotonic() - at  # answered after the retries
        fault.note = f"closed after {after:.2f} s" if mid else f"answered before the {after:.2f} s it waited"
