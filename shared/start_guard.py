"""Back-off for a gateway or worker that crashes before it is up, and an end to its start after a few.

supervisord cannot do this for us: a process is "up" only when it says so (a worker once it sent
Ready, a gateway once it listens), which may take minutes for a large model, so every program runs
with startsecs=0 (conf/supervisord.conf) and supervisord's own back-off, which applies only within
startsecs, never acts. A crash before up (an illegal instruction in llama.cpp, a kill -9 or OOM kill
while loading) would then be restarted at once, for ever. Each start therefore counts itself in a
file of the run directory before it does anything else, and clears the count once up or once it
refuses (a refusal is not a crash: it exits 2 and is not restarted).

Invariant: the count in a program's file is the number of its starts in a row that ended without
being up and without refusing. A start that finds n ≥ 1 there waits BACKOFF_S[n-1] seconds (1, 2,
4, 8) before it goes on; one that finds MAX_CRASHES refuses (exit 2, one line), so `jevfleet
serve` stops the fleet with that line rather than restarting a process that cannot come up.
`jevfleet serve` clears every count when it starts a fleet.
"""
from __future__ import annotations

import re
from pathlib import Path

BACKOFF_S = (1.0, 2.0, 4.0, 8.0)
MAX_CRASHES = len(BACKOFF_S) + 1
GUARD_DIR = "starts"  # in the run directory


class CrashLoop(RuntimeError):
    """This program crashed MAX_CRASHES times in a row before it was up: it refuses to start."""


class StartGuard:
    def __init__(self, run_dir: Path, program: str) -> None:
        """program: a name for the process, unique in its run directory (gateway, worker w00)."""
        self.program = program
        self.path = run_dir / GUARD_DIR / re.sub(r"[^\w.-]", "_", program)

    def crashes(self) -> int:
        try:
            return int(self.path.read_text() or 0)
        except (FileNotFoundError, ValueError):
            return 0

    def begin(self) -> float:
        """Count this start; the seconds it must wait before it goes on (0 after a clean one).
        Raises CrashLoop once the count is MAX_CRASHES."""
        crashes = self.crashes()
        if crashes >= MAX_CRASHES:
            raise CrashLoop(f"{self.program} crashed {crashes} times in a row before it was up (its log says how); "
                            "not starting it again (`supervisorctl start` tries once more)")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text(str(crashes + 1))  # before the wait: a kill during it counts too
        return BACKOFF_S[crashes - 1] if crashes else 0.0

    def done(self) -> None:
        """The process is up, or refused: its start did not crash."""
        self.path.unlink(missing_ok=True)


def clear_all(run_dir: Path) -> None:
    """A new fleet starts with no count (jevfleet serve)."""
    for path in (run_dir / GUARD_DIR).glob("*"):
        path.unlink(missing_ok=True)
