"""Workers that answer every request at once: real DEALER sockets speaking the real messages
(shared/messages.py), no model. Benchmarks use them to measure the gateway alone, with as many
registered workers as a big fleet would have. A benchmark stand-in, never part of the product.

    .venv/bin/python -m bench.instant_worker --endpoint ipc:///tmp/x/workers.ipc --workers 64

start_gateway() runs a real gateway process with such workers in another process.
"""
from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import psutil
import zmq
import zmq.asyncio

from tests.fake_worker import FakeWorker
from tests.fleet import ROOT, free_port

HEARTBEAT_S = 0.5  # the fleet's default heartbeat period


async def serve(endpoint: str, workers: int, prefix: str) -> None:
    ctx = zmq.asyncio.Context()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    fleet = [FakeWorker(ctx, endpoint, f"{prefix}w{n:03d}", pid=os.getpid(), cores=(0,)) for n in range(workers)]
    for worker in fleet:
        await worker.start(beat_s=HEARTBEAT_S)
    tasks = [asyncio.create_task(w.answer_every_score()) for w in fleet]
    await stop.wait()
    for task in tasks:
        task.cancel()
    for worker in fleet:
        worker.close()
    ctx.term()


def cpu_s(pid: int) -> float:
    times = psutil.Process(pid).cpu_times()
    return times.user + times.system


@dataclass
class InstantGateway:
    url: str
    proc: subprocess.Popen
    workers: subprocess.Popen

    def cpu_s(self) -> float:
        """User + system CPU of the gateway process so far (all its threads)."""
        return cpu_s(self.proc.pid)

    def workers_cpu_s(self) -> float:
        return cpu_s(self.workers.pid)

    def stop(self) -> None:
        for proc in (self.workers, self.proc):
            proc.terminate()
        for proc in (self.workers, self.proc):
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()


def wait_ready(url: str, timeout: float = 120) -> None:
    host, port = url.removeprefix("http://").split(":")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            conn = http.client.HTTPConnection(host, int(port), timeout=5)
            conn.request("GET", "/health")
            resp = conn.getresponse()
            if resp.status == 200 and json.loads(resp.read()).get("status") == "ready":
                return
        except (OSError, ValueError):
            pass
        time.sleep(0.2)
    raise TimeoutError(f"{url} not ready after {timeout}s")


def start_gateway(run_dir: Path, workers: int, *flags: str) -> InstantGateway:
    """`jevfleet gateway` (with extra settings flags) and `workers` instant workers, ready."""
    run_dir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    log = open(run_dir / "gateway.log", "w")
    proc = subprocess.Popen([sys.executable, "-m", "jevfleet", "gateway", "--port", str(port), "--workers",
                             str(workers), "--run-dir", str(run_dir), *flags],
                            cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    stand_in = subprocess.Popen([sys.executable, "-m", "bench.instant_worker", "--endpoint",
                                 f"ipc://{run_dir}/workers.ipc", "--workers", str(workers)],
                                cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    gateway = InstantGateway(f"http://127.0.0.1:{port}", proc, stand_in)
    try:
        wait_ready(gateway.url)
    except Exception:
        gateway.stop()
        raise
    return gateway


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--endpoint", required=True, help="the gateway's ZeroMQ endpoint")
    parser.add_argument("--workers", type=int, default=1, help="worker identities to register (default 1)")
    parser.add_argument("--prefix", default="instant/", help="worker id prefix (default instant/)")
    args = parser.parse_args()
    asyncio.run(serve(args.endpoint, args.workers, args.prefix))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
