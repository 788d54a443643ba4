"""Which workers may join the fleet: only those that serve exactly what the gateway serves.

Invariant: a worker whose stated facts (shared/serving.py) differ from the gateway's is never
a member of the fleet, so no request is ever sent to it. It is logged once per process and
listed by /health with the reason until it has been silent for a while. A worker that could not
start at all (CannotStart: it exits 2 after saying why) is listed as "failed" with its reason
until a worker of that id is admitted.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from shared.messages import CannotStart, Ready
from shared.serving import mismatch

log = logging.getLogger("jevfleet.fleet")


@dataclass
class Refused:
    worker_id: str
    pid: int
    reason: str
    last_seen: float  # monotonic
    state: str = "refused"  # refused: serves something else; failed: could not start, never heard again


class Admission:
    def __init__(self, expected: dict[str, str] | None) -> None:
        """expected: the gateway's own facts; None admits every worker (unit tests of the fleet)."""
        self.expected = expected
        self.refused: dict[str, Refused] = {}

    def admits(self, msg: Ready) -> bool:
        """Whether the sender of this READY/HEARTBEAT may serve; a refusal is logged once."""
        reason = None if self.expected is None else mismatch(self.expected, msg.serves)
        if reason is None:
            self.refused.pop(msg.worker_id, None)
            return True
        known = self.refused.get(msg.worker_id)
        if known is None or known.pid != msg.pid:
            log.warning("refused worker %s (pid %d): it does not serve the gateway's model: %s",
                        msg.worker_id, msg.pid, reason)
        self.refused[msg.worker_id] = Refused(msg.worker_id, msg.pid, reason, time.monotonic())
        return False

    def cannot_start(self, msg: CannotStart) -> None:
        """A worker that failed before it was up says why, once, and exits."""
        log.warning("worker %s (pid %d) could not start: %s", msg.worker_id, msg.pid, msg.reason)
        self.refused[msg.worker_id] = Refused(msg.worker_id, msg.pid, msg.reason, time.monotonic(), "failed")

    def describe(self, forget_after_s: float) -> list[dict]:
        """The refused workers heard from within forget_after_s, and those that could not start, for /health."""
        now = time.monotonic()
        for worker_id in [w for w, r in self.refused.items()
                          if r.state == "refused" and now - r.last_seen > forget_after_s]:
            del self.refused[worker_id]
        return [{"id": r.worker_id, "pid": r.pid, "state": r.state, "reason": r.reason}
                for r in self.refused.values()]
