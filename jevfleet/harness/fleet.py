"""A real fleet (`jevfleet serve` → supervisord → gateway + workers) in a run directory of its
own, for black-box tests, benchmarks and load sweeps.

Readiness is read from /health, the signal an operator or a load balancer uses; a wait fails at
once when the fleet has exited, with its logs.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from client.net import free_port, probe
from jevfleet.harness.processes import stop_process, wait_until
from shared.config import PROJECT_ROOT

# When set, why the running test may not start a fleet: tests/tiers.py sets it per test, so that
# a test in the wrong tier fails at once instead of slowing the fast one down.
refusal = ""

HealthCheck = Callable[[dict], object]
CHECKED = ["--check-lifecycle", "1"]  # flags of a test's fleet: the gateway checks its invariant at every event


def health(url: str) -> tuple[int, dict]:
    """GET /health: (status, body); (0, {}) when nothing answers or the body is not JSON."""
    status, _, raw = probe("GET", url + "/health")
    try:
        return status, json.loads(raw)
    except ValueError:
        return 0, {}


def is_ready(body: dict) -> bool:
    return body.get("status") == "ready"


def wait_healthy(url: str, check: HealthCheck = is_ready, what: str = "ready", *, timeout: float = 120,
                 proc: subprocess.Popen | None = None, logs: Callable[[], str] = lambda: "") -> dict:
    """Poll /health until check(body) holds; that body."""
    return wait_until(lambda: health(url)[1], what, done=lambda body: bool(body) and check(body), timeout=timeout,
                      proc=proc, logs=logs)


@dataclass
class Fleet:
    port: int
    run_dir: Path
    proc: subprocess.Popen  # `jevfleet serve`, the parent of its supervisord

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def health(self) -> tuple[int, dict]:
        return health(self.url)

    def supervisorctl(self, *args: str) -> str:
        exe = Path(sys.executable).parent / "supervisorctl"
        out = subprocess.run([str(exe), "-c", str(self.run_dir / "supervisord.conf"), *args],
                             capture_output=True, text=True, timeout=60)
        return out.stdout + out.stderr

    def wait_for(self, check: HealthCheck, what: str, timeout: float = 120) -> dict:
        """Poll /health until check(body) holds; that body."""
        return wait_healthy(self.url, check, what, timeout=timeout, proc=self.proc, logs=self.logs)

    def lifecycle_breaches(self) -> list[str]:
        """The lines in which the gateway logged a broken request lifecycle (with its
        check_lifecycle setting on: CHECKED); the log outlives a gateway that was restarted."""
        log = self.run_dir / "gateway.log"
        lines = log.read_text().splitlines() if log.exists() else []
        return [line for line in lines if "request lifecycle broken" in line]

    def logs(self) -> str:
        return "\n".join(f"--- {p.name}\n{p.read_text()[-3000:]}" for p in sorted(self.run_dir.glob("*.log")))

    def stop(self) -> int | None:
        """SIGTERM (supervisord stops every program), SIGKILL after 90 s; the exit code."""
        return stop_process(self.proc)


def start_fleet(run_dir: Path, *, workers: int | None = 1, extra: list[str] | None = None,
                env: dict[str, str] | None = None, timeout: float = 120) -> Fleet:
    """`jevfleet serve` on a free port with `workers` workers (None: as configured) and `extra`
    flags, its output in run_dir/serve.out; returned once /health says ready."""
    if refusal:
        raise RuntimeError(refusal)
    run_dir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    cmd = [sys.executable, "-m", "jevfleet", "serve", "--port", str(port), "--run-dir", str(run_dir),
           *(["--workers", str(workers)] if workers is not None else []), *(extra or [])]
    with (run_dir / "serve.out").open("w") as out:
        proc = subprocess.Popen(cmd, cwd=PROJECT_ROOT, env={**os.environ, **(env or {})},
                                stdout=out, stderr=subprocess.STDOUT)
    fleet = Fleet(port=port, run_dir=run_dir, proc=proc)
    try:
        fleet.wait_for(is_ready, "ready", timeout)
    except BaseException:
        fleet.stop()
        raise
    return fleet
