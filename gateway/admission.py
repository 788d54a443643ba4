"""Which workers may join the fleet: only those that serve exactly what the gateway serves.

Invariant: a worker whose stated facts (shared/serving.py) differ from the gateway's is never
a member of the fleet, so no request is ever sent to it. Its arithmetic (the bits of its start-up
probe's answer) must equal the fleet's: pinned by the fleet_arithmetic setting, or else set by the
first worker admitted since this gateway started. A restarted gateway without the setting takes the
first worker back as the reference: if that one is the odd one, the others are refused and /health
says so, both builds named; pinning the setting (its value is in /health) removes that case. It is logged once per process and
listed by /health with the reason until it has been silent for a while. A worker that could not
start at all (CannotStart: it exits 2 after saying why) is listed as "failed" with its reason
until a worker of that id is admitted. A process claiming the id of a live worker is told so
(gateway/membership.py) and listed as "duplicate" for DUPLICATE_LISTED_S.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from shared.messages import CannotStart, Ready
from shared.serving import mismatch

log = logging.getLogger("jevfleet.fleet")
DUPLICATE_LISTED_S = 600.0  # how long /health lists a process refused for a duplicate id (it has exited)


@dataclass
class Refused:
    worker_id: str
    pid: int
    reason: str
    last_seen: float  # monotonic
    state: str = "refused"  # refused: serves something else; failed: could not start, never heard again;
    # duplicate: claimed a live worker's id, told so, exited


class Admission:
    def __init__(self, expected: dict[str, str] | None, arithmetic: str = "") -> None:
        """expected: the gateway's own facts; None admits every worker (unit tests of the fleet).
        arithmetic: the digest every member's probe answer must have ("" = the first member's)."""
        self.expected = expected
        self.arithmetic = arithmetic
        self.arithmetic_from = "the fleet_arithmetic setting" if arithmetic else ""
        self.refused: dict[str, Refused] = {}
        self.duplicates: dict[tuple[str, int], Refused] = {}  # by (id, pid): the id's holder is admitted

    def admits(self, msg: Ready) -> bool:
        """Whether the sender of this READY/HEARTBEAT may serve; a refusal is logged once."""
        reason = None if self.expected is None else (mismatch(self.expected, msg.serves) or self._odd(msg.serves))
        if reason is None:
            self.refused.pop(msg.worker_id, None)
            if self.expected is not None and not self.arithmetic and msg.serves.get("arithmetic"):
                self.arithmetic = msg.serves["arithmetic"]
                self.arithmetic_from = f"worker {msg.worker_id}, {msg.serves.get('llama_build', 'build not stated')}"
                log.info("the fleet's arithmetic is %s (%s)", self.arithmetic, self.arithmetic_from)
            return True
        known = self.refused.get(msg.worker_id)
        if known is None or known.pid != msg.pid:
            log.warning("refused worker %s (pid %d): it does not serve what the gateway serves: %s",
                        msg.worker_id, msg.pid, reason)
        self.refused[msg.worker_id] = Refused(msg.worker_id, msg.pid, reason, time.monotonic())
        return False

    def _odd(self, serves: dict[str, str]) -> str | None:
        """Why a worker's arithmetic is not the fleet's, naming both builds; None if it is."""
        stated = serves.get("arithmetic", "")
        if not self.arithmetic or stated == self.arithmetic:
            return None
        return (f"its arithmetic differs: its start-up probe answers with bits {stated or 'not stated'} "
                f"({serves.get('llama_build', 'build not stated')}), the fleet's with {self.arithmetic} "
                f"({self.arithmetic_from}); the same prompt would get other answers from it")

    def duplicate(self, msg: Ready, *, holder_pid: int) -> str:
        """A second process claims the id of a live worker: why it is refused (logged once, listed
        in /health for DUPLICATE_LISTED_S; the process exits on hearing it)."""
        reason = (f"worker id {msg.worker_id} is held by a live worker (pid {holder_pid}); "
                  "start this one with another --id (or --index)")
        known = self.duplicates.get((msg.worker_id, msg.pid))
        if known is None:
            log.warning("refused worker %s (pid %d): %s", msg.worker_id, msg.pid, reason)
        self.duplicates[msg.worker_id, msg.pid] = Refused(msg.worker_id, msg.pid, reason, time.monotonic(),
                                                           "duplicate")
        return reason

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
        for key in [k for k, r in self.duplicates.items() if now - r.last_seen > DUPLICATE_LISTED_S]:
            del self.duplicates[key]
        return [{"id": r.worker_id, "pid": r.pid, "state": r.state, "reason": r.reason}
                for r in [*self.refused.values(), *self.duplicates.values()]]
