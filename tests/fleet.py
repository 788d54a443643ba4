"""Starting a real fleet (`jevfleet serve` → supervisord → gateway + workers) for black-box tests.

Readiness is read from /health, the same signal an operator or a load balancer would use.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
refusal = ""  # when set, why the running test may not start a fleet (tests/tiers.py guard)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http(method: str, url: str, body: bytes | None = None, headers: dict | None = None,
         timeout: float = 60) -> tuple[int, dict, bytes]:
    req = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, dict(resp.headers), resp.read()
    except urllib.error.HTTPError as err:
        return err.code, dict(err.headers), err.read()


def post_json(url: str, payload: object, headers: dict | None = None) -> tuple[int, dict, object]:
    status, hdrs, raw = http("POST", url, json.dumps(payload).encode(),
                             {"Content-Type": "application/json", **(headers or {})})
    return status, hdrs, json.loads(raw)


@dataclass
class Fleet:
    port: int
    run_dir: Path
    proc: subprocess.Popen

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def health(self) -> tuple[int, dict]:
        try:
            status, _, raw = http("GET", self.url + "/health", timeout=5)
            return status, json.loads(raw)
        except (OSError, ValueError):
            return 0, {}

    def supervisorctl(self, *args: str) -> str:
        exe = Path(sys.executable).parent / "supervisorctl"
        out = subprocess.run([str(exe), "-c", str(self.run_dir / "supervisord.conf"), *args],
                             capture_output=True, text=True, timeout=60)
        return out.stdout + out.stderr

    def wait_for(self, predicate, what: str, timeout: float = 120) -> dict:
        """Poll /health until predicate(body) holds; /health is the readiness signal we ship."""
        deadline = time.monotonic() + timeout
        body: dict = {}
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"fleet exited ({self.proc.returncode}) while waiting for {what}:\n{self.logs()}")
            _, body = self.health()
            if body and predicate(body):
                return body
            time.sleep(0.2)
        raise TimeoutError(f"fleet not {what} after {timeout}s; last health {body}\n{self.logs()}")

    def logs(self) -> str:
        return "\n".join(f"--- {p.name}\n{p.read_text()[-3000:]}" for p in sorted(self.run_dir.glob("*.log")))

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=90)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


def start_fleet(run_dir: Path, *, workers: int = 1, extra: list[str] | None = None,
                env: dict | None = None) -> Fleet:
    if refusal:
        raise RuntimeError(refusal)
    port = free_port()
    cmd = [sys.executable, "-m", "jevfleet", "serve", "--port", str(port), "--workers", str(workers),
           "--run-dir", str(run_dir), *(extra or [])]
    proc = subprocess.Popen(cmd, cwd=ROOT, env={**os.environ, **(env or {})},
                            stdout=open(run_dir / "serve.out", "w"), stderr=subprocess.STDOUT)
    fleet = Fleet(port=port, run_dir=run_dir, proc=proc)
    try:
        fleet.wait_for(lambda h: h.get("status") == "ready", "ready")
    except Exception:
        fleet.stop()
        raise
    return fleet
