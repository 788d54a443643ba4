"""How a gateway or worker that cannot start says so: one line on stderr, and exit status 2.

Invariant: a gateway or worker process exits with REFUSED only when it fails before it is up (a
worker before it sent Ready or when the gateway answered its Ready with Refuse, since its id is a
live worker's; a gateway before it listens on its port and its workers' endpoint), and the last line it writes is then
MARK followed by the reason, on one line. Every failure after that exits 1. supervisord counts 2
as an expected exit (conf/supervisord.conf) and so does not start the process again; `jevfleet
serve` (jevfleet/watch.py) sees a program exited with 2, prints that line and stops the fleet with
exit 2. A start-up failure does not go away by starting again (a file that is not a GGUF, the
start-up canary's refusal, a setting the process cannot honour); a crash of a process that was up
may, and is restarted as before.
"""
from __future__ import annotations

import sys

REFUSED = 2  # also the exit status of a mistyped setting (jevfleet/cli.py): both are set-up mistakes
MARK = "refused at start: "


def reason(exc: BaseException) -> str:
    """The exception in one line: the first line of its text, else its type's name."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def refuse(who: str, exc: BaseException) -> int:
    """Write the one line serve prints (after the traceback the caller logged or Python printed,
    so that it is the last); the exit status to return."""
    print(f"jevfleet {who}: {MARK}{reason(exc)}", file=sys.stderr, flush=True)
    return REFUSED


def refusal_in(log_text: str) -> str | None:
    """The reason in the last refusal line of a process's log, if there is one."""
    for line in reversed(log_text.splitlines()):
        _, mark, said = line.partition(MARK)
        if mark:
            return said.strip()
    return None
