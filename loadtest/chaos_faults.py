"""The faults of the chaos run, injected one at a time into the fleet of chaos_fleet.py.

Each fault is done the way it happens in production, to processes and links the run started:
a worker or a gateway killed with SIGKILL (supervisord restarts it), a worker stopped with
SIGTERM by `supervisorctl restart` (it drains, exits 0 and is started again, as an operator
restarts one), a worker or a gateway frozen with SIGSTOP for longer than dead_after_s and then
continued, the worker host's link taken down and brought back up, a worker killed while that link
is down (two faults at once), and a client that closes its connection to a gateway before the
answer. Victims, stall and cut lengths come from the run's seeded random.

For each fault: when its effect was seen (the gateway saw the worker gone, a new pid serving,
...), and when the fleet was whole again (chaos_fleet.ChaosFleet.missing() empty), both counted
from the moment it was injected.
"""
from __future__ import annotations

import collections
import os
import random
import re
import signal
import time
from dataclasses import dataclass
from typing import Callable

from jevfleet.harness import netns
from loadtest.chaos_clients import DISCONNECTED, Clients
from loadtest.chaos_fleet import (ADDRESSES, GATEWAYS, LB_NAMES, LINK_HOST, WORKER_PROGRAM, WORKERS,
                                          ChaosFleet)

KINDS = ("worker kill -9", "worker SIGTERM (drain)", "gateway kill -9", "worker SIGSTOP/SIGCONT", "link cut",
         "client disconnect", "gateway SIGSTOP/SIGCONT", "worker kill -9 during a link cut")
GATEWAY_KINDS = ("gateway kill -9", "gateway SIGSTOP/SIGCONT")  # where HAProxy's retries matter
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
    front: str = ""  # the HAProxy front the clients went through (retries on or off)
    held: dict[str, int] | None = None  # a stalled gateway: what came of the attempts it held through the stall
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
            self._disconnect, self._gateway_stall, self._kill_in_cut)))

    def inject(self, kind: str) -> Fault:
        """Do one fault of `kind`, then wait (at most WHOLE_TIMEOUT_S) for the fleet to be whole."""
        before = self.fleet.fleet_counters()
        drops = {wid: self._connection_drops(wid) for wid in WORKERS}
        at = time.monotonic()
        fault = Fault(kind, "", round(at - self.started, 1), front=self.clients.front)
        self.doers[kind](fault, at)
        whole = within(lambda: not self.fleet.missing(), WHOLE_TIMEOUT_S)
        fault.whole_s = None if whole is None else time.monotonic() - at
        if whole is None:
            fault.note += f"; still missing: {self.fleet.missing()}"
        if fault.held is not None:  # the stalled gateway's attempts, answered by now or given up on
            fault.held = self._held(fault.target, at + fault.restored_s)
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

    def _link_cut(self, fault: Fault, at: float, during: Callable[[], str] | None = None) -> None:
        """`during`: a second fault, done once the cut worker is out (the cut is 1 s longer for it,
        and it comes at least 1 s before the link is back); returns its note."""
        host = LINK_HOST
        wid = fault.target = next(w for w in WORKERS if w.startswith(f"host{host}/"))
        spare = 0.0 if during is None else 1.0
        cut = self.dead_after_s + self.rng.uniform(1.0, 3.0) + spare
        self.fleet.hosts.set_link(host, up=False)
        also = ""
        try:
            out = within(lambda: self.fleet.worker_state(wid).get("state") == "down", cut - spare)
            if during is not None:
                also = during()
        finally:
            time.sleep(max(0.0, at + cut - time.monotonic()))  # the cut's length
            self.fleet.hosts.set_link(host, up=True)
        fault.restored_s = time.monotonic() - at
        fault.seen_s = out
        fault.note = f"cut {cut:.1f} s; " + ("taken out of service" if out is not None else "never taken out")
        fault.note += also

    def _kill_in_cut(self, fault: Fault, at: float) -> None:
        """The link to D cut and, while it is down, a worker (a seeded one of the three: D's own,
        which its supervisord restarts behind the cut, or one on the other side) killed."""
        victim = self.rng.choice(sorted(WORKERS))

        def kill() -> str:
            pid = self.fleet.worker_pid(victim)
            killed = time.monotonic()
            os.kill(pid, signal.SIGKILL)
            if victim.startswith(f"host{LINK_HOST}/"):  # its gateway cannot hear of it: the restart is seen
                gone = within(lambda: self.fleet.worker_pid(victim) not in (0, pid), SEEN_TIMEOUT_S)
                return f"; {victim} killed {killed - at:.1f} s into the cut, " + (
                    "restarted behind the cut" if gone is not None else "NOT restarted") + (
                    "" if gone is None else f" {gone:.1f} s after")
            gone = within(lambda: (w := self.fleet.worker_state(victim)).get("state") != "up"
                          or w.get("pid") != pid, SEEN_TIMEOUT_S)
            return f"; {victim} killed {killed - at:.1f} s into the cut, " + (
                "not seen gone" if gone is None else f"taken out {gone:.2f} s after")

        self._link_cut(fault, at, kill)
        fault.target += f" + {victim}"
        fault.gateway = WORKERS[fault.target.split(" + ")[0]][1]  # the cut worker's: its counters tell of both

    def _gateway_stall(self, fault: Fault, at: float) -> None:
        """A gateway frozen (SIGSTOP) for dead_after_s + 1-3 s, then continued. Its port still
        accepts connections (the kernel does), so HAProxy's health check, not a refused
        connection, takes it out; what it held waits and is answered once it runs again."""
        host = fault.target = self.rng.choice(sorted(GATEWAYS))
        fault.gateway = host
        stall = self.dead_after_s + self.rng.uniform(1.0, 3.0)
        pid = self.fleet.gateway_pid(host)
        os.kill(pid, signal.SIGSTOP)
        try:
            out = within(lambda: self.fleet.lb(fault.front).get(LB_NAMES[host], "").startswith("DOWN"), stall)
        finally:
            time.sleep(max(0.0, at + stall - time.monotonic()))  # the stall's length
            os.kill(pid, signal.SIGCONT)
        fault.restored_s = time.monotonic() - at
        fault.seen_s = out
        fault.held = {}  # filled in once the fleet is whole (inject)
        fault.note = f"stalled {stall:.1f} s; " + ("HAProxy took it out" if out is not None else "never taken out")

    def _held(self, host: str, resumed: float) -> dict[str, int]:
        """Attempts the gateway on `host` answered after it resumed that had started before: what
        each came to (an attempt not answered by that gateway does not carry its name)."""
        name = LB_NAMES[host]
        return dict(collections.Counter(a.outcome for a in self.clients.snapshot()
                                        if a.gateway == name and a.started < resumed <= a.ended))

    def _disconnect(self, fault: Fault, at: float) -> None:
        req = self.rng.choice(self.clients.reqs)
        host = self.rng.choice(sorted(GATEWAYS))
        after = self.rng.uniform(0.05, 0.5)
        fault.target, fault.gateway = f"request {req.index} at gateway {host}", host
        first = netns.run_in(self.fleet.hosts.ns("a"), lambda: self.clients.disconnect(
            req, ADDRESSES[host], self.fleet.hosts.http_port, after))
        fault.seen_s = time.monotonic() - at  # answered after the retries
        fault.note = (f"closed after {after:.2f} s" if first == DISCONNECTED
                      else f"{first} before the {after:.2f} s it waited")
