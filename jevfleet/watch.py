"""What `jevfleet serve` watches while its supervisord runs: programs that refused at start.

A gateway or worker that fails before it is up exits 2 with its reason as its last line
(shared/refusal.py). supervisord counts 2 as an expected exit (conf/supervisord.conf), so the
process stays EXITED with that status instead of being started again, and it stays visible until
serve asks, every POLL_S over supervisord's socket. A program supervisord could not even spawn
(FATAL) is a refusal too. Invariant: a process that exits any other way (a crash or kill -9 of
one that was up, a drain) is never reported here; supervisord restarts it as before.
"""
from __future__ import annotations

import http.client
import subprocess
import xmlrpc.client
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from supervisor.xmlrpc import SupervisorTransport

from shared.refusal import REFUSED, refusal_in

POLL_S = 0.5
TAIL_BYTES = 8192  # of a refused process's log: its refusal line is the last thing it wrote


@dataclass(frozen=True)
class Refusal:
    process: str  # supervisord's name for it: gateway, worker:worker_00
    reason: str  # one line


def supervisor_rpc(socket: Path) -> Any:
    """supervisord's XML-RPC interface over its unix socket (the one supervisorctl uses)."""
    return xmlrpc.client.ServerProxy("http://localhost",
                                     transport=SupervisorTransport(None, None, f"unix://{socket}")).supervisor


def last_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    return lines[-1].strip() if lines else ""


def refusals(infos: list[dict], log_tail: Callable[[str], str]) -> list[Refusal]:
    """The processes among supervisord's `infos` (getAllProcessInfo) that refused at start, with
    the reason each gave; log_tail(process) reads the end of its log."""
    found = []
    for info in infos:
        process = info["name"] if info["group"] == info["name"] else f"{info['group']}:{info['name']}"
        if info["statename"] == "EXITED" and info["exitstatus"] == REFUSED:
            tail = log_tail(process)
            found.append(Refusal(process, refusal_in(tail) or last_line(tail) or f"exit status {REFUSED}"))
        elif info["statename"] == "FATAL":
            found.append(Refusal(process, info["spawnerr"] or "supervisord could not start it"))
    return found


def watch(supervisord: subprocess.Popen, socket: Path, poll_s: float = POLL_S) -> list[Refusal]:
    """Until supervisord exits ([]), or until some of its programs refused at start (those, with
    supervisord still running)."""
    while supervisord.poll() is None:
        rpc = supervisor_rpc(socket)  # afresh each time: its connection is unusable after a failed call
        try:
            found = refusals(rpc.getAllProcessInfo(),
                             lambda process: rpc.tailProcessStdoutLog(process, 0, TAIL_BYTES)[0])
        except (OSError, xmlrpc.client.Error, http.client.HTTPException):
            found = []  # not listening yet, or shutting down: asked again
        if found:
            return found
        try:
            supervisord.wait(timeout=poll_s)
        except subprocess.TimeoutExpired:
            pass
    return []
