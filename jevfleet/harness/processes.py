"""Other processes seen from outside: wait until something holds about them, and stop the ones we
started. Every wait has a deadline and fails at once, with what it last saw, when the process it
waits for has exited: a harness that hangs or fails with "timed out" alone costs more than a test.
"""
from __future__ import annotations

import os
import signal
import subprocess
import time
from contextlib import contextmanager
from typing import Callable, Iterable, Iterator, TypeVar

Seen = TypeVar("Seen")


def wait_until(probe: Callable[[], Seen], what: str, *, done: Callable[[Seen], object] = bool,
               timeout: float = 120, every: float = 0.2, proc: subprocess.Popen | None = None,
               logs: Callable[[], str] = lambda: "") -> Seen:
    """Call probe() every `every` seconds until done(its value) holds, and return that value.

    RuntimeError if `proc` exits meanwhile, TimeoutError after `timeout` seconds; both say `what`
    was awaited, the last value seen and logs()."""
    deadline = time.monotonic() + timeout
    while True:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"process exited ({proc.returncode}) while waiting for {what}\n{logs()}")
        seen = probe()
        if done(seen):
            return seen
        if time.monotonic() >= deadline:
            raise TimeoutError(f"not {what} after {timeout:g} s; last seen {seen!r}\n{logs()}")
        time.sleep(every)


def stop_processes(procs: Iterable[subprocess.Popen], timeout: float = 90) -> list[int | None]:
    """SIGTERM to every process still running, then wait for each (SIGKILL after `timeout`);
    their exit codes. SIGTERM first to all, so that they drain side by side."""
    procs = list(procs)
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return [proc.returncode for proc in procs]


def stop_process(proc: subprocess.Popen, timeout: float = 90) -> int | None:
    """stop_processes for one process: its exit code (negative: the signal that ended it)."""
    return stop_processes([proc], timeout)[0]


@contextmanager
def paused(pids: Iterable[int]) -> Iterator[None]:
    """The processes stopped (SIGSTOP) for the block and continued after it: a paused worker reads
    and answers nothing, so what it holds stays where it is however fast the machine is. Only for
    processes we started; a pause longer than dead_after_s takes a worker out of service."""
    pids = list(pids)
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        for pid in pids:
            os.kill(pid, signal.SIGCONT)
