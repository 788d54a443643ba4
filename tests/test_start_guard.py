"""shared/start_guard.py: starts that crash before they are up wait 1, 2, 4, 8 s, and the sixth
refuses; being up or refusing clears the count. Fleet tier: a worker killed before it is up five
times in a row under the real supervisord ends `jevfleet serve` with that one line."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from client.net import free_port
from shared.config import PROJECT_ROOT
from shared.refusal import MARK, REFUSED
from shared.start_guard import BACKOFF_S, MAX_CRASHES, CrashLoop, StartGuard, clear_all
from tests.test_supervise import spawned


def test_each_crash_before_up_doubles_the_wait_and_the_sixth_start_refuses(tmp_path):
    guard = StartGuard(tmp_path, "worker host/w00")
    assert guard.path.name == "worker_host_w00"  # one file per program, whatever its id holds
    waits = [guard.begin() for _ in range(MAX_CRASHES)]  # each start crashes: nothing clears the count
    assert waits == [0.0, *BACKOFF_S] == [0.0, 1.0, 2.0, 4.0, 8.0]
    with pytest.raises(CrashLoop, match="worker host/w00 crashed 5 times in a row before it was up"):
        guard.begin()


def test_a_start_that_comes_up_or_refuses_clears_the_count_and_serve_clears_all(tmp_path):
    guard = StartGuard(tmp_path, "gateway")
    guard.begin()
    guard.done()  # up
    assert guard.begin() == 0.0 and guard.crashes() == 1
    other = StartGuard(tmp_path, "worker w01")
    other.begin()
    clear_all(tmp_path)
    assert (guard.crashes(), other.crashes()) == (0, 0)


@pytest.mark.fleet
@pytest.mark.timeout(300)
def test_a_worker_killed_before_it_is_up_five_times_ends_serve_with_one_line(tmp_path):
    """kill -9 while it starts (a stand-in for an illegal instruction or an OOM kill while loading):
    with startsecs=0 supervisord restarts it at once; the worker's own count makes it wait, then
    refuse. A workers-only serve (no gateway needed: the worker is never up)."""
    run_dir = tmp_path / "run"
    cmd = [sys.executable, "-m", "jevfleet", "serve", "--port", str(free_port()), "--workers", "1", "--role",
           "workers", "--endpoint", f"ipc://{tmp_path}/none.ipc", "--run-dir", str(run_dir)]
    serve = subprocess.Popen(cmd, cwd=PROJECT_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    killed: set[int] = set()
    deadline = time.monotonic() + 240
    try:
        while len(killed) < MAX_CRASHES and time.monotonic() < deadline and serve.poll() is None:
            pid = worker_pid(run_dir)
            if pid and pid not in killed and counted(run_dir, len(killed)):
                os.kill(pid, signal.SIGKILL)  # it has counted itself (and said how long it waits): kill it
                killed.add(pid)
            time.sleep(0.05)  # a poll of supervisord's state with a deadline, not a wait for an event
        out, err = serve.communicate(timeout=deadline - time.monotonic())
    finally:
        if serve.poll() is None:
            serve.kill()
    assert len(killed) == MAX_CRASHES and serve.returncode == REFUSED, err
    (line,) = [line for line in err.splitlines() if MARK in line]
    assert f"worker w00 crashed {MAX_CRASHES} times in a row before it was up" in line, err
    assert spawned(run_dir, "worker_00") == MAX_CRASHES + 1
    log = (run_dir / "worker_00.log").read_text()
    assert all(f"waiting {w:.0f} s" in log for w in BACKOFF_S), log[-2000:]


def worker_pid(run_dir) -> int:
    """worker_00's pid while supervisord runs it, else 0."""
    conf = run_dir / "supervisord.conf"
    if not conf.exists():
        return 0
    out = subprocess.run([str(Path(sys.executable).parent / "supervisorctl"), "-c", str(conf), "pid",
                          "worker:worker_00"], capture_output=True, text=True, timeout=30).stdout.strip()
    return int(out) if out.isdigit() and int(out) > 0 else 0


def counted(run_dir, crashes: int) -> bool:
    """Whether worker w00's start after `crashes` kills has counted itself and logged its wait."""
    if StartGuard(run_dir, "worker w00").crashes() != crashes + 1:
        return False
    return crashes == 0 or f"waiting {BACKOFF_S[crashes - 1]:.0f} s" in (run_dir / "worker_00.log").read_text()
