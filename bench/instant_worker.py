"""Workers that answer every request at once: the harness's scripted workers
(jevfleet/harness/scripted_worker.py: real DEALER sockets speaking the real messages, no model),
in a process of their own. Benchmarks use them to measure the gateway alone, with as many
registered workers as a big fleet would have. A benchmark stand-in, never part of the product.

    .venv/bin/python -m bench.instant_worker --endpoint ipc:///tmp/x/workers.ipc --workers 64

start_gateway() runs a real gateway process with such workers in another process.
"""
from __future__ import annotations

import argparse
import asyncio
import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import psutil
import zmq
import zmq.asyncio

from client.net import free_port
from jevfleet.harness.fleet import wait_healthy
from jevfleet.harness.processes import stop_processes
from jevfleet.harness.scripted_worker import ScriptedWorker
from shared.config import PROJECT_ROOT, Settings, load_settings
from shared.derive import serving_profile
from shared.llama import llama, load_model, tokenize
from shared.model_files import file_sha256, resolve_model
from shared.serving import serving_facts

HEARTBEAT_S = Settings.model_fields["heartbeat_s"].default  # the fleet's default heartbeat period


def configured_facts() -> dict[str, str]:
    """What a real worker at the configured settings states (shared/serving.py): the gateway
    admits only workers that serve its model, profile and mode."""
    settings = load_settings()
    profile = serving_profile(settings)
    model_file = resolve_model(profile, settings.cache_path, settings.model)
    vocab = llama().llama_model_get_vocab(load_model(model_file, vocab_only=True))
    return serving_facts(profile=profile, model_sha256=file_sha256(model_file), mode=settings.mode,
                         tokenize=partial(tokenize, vocab))


async def serve(endpoint: str, workers: int, prefix: str) -> None:
    serves = configured_facts()
    ctx = zmq.asyncio.Context()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    fleet = [ScriptedWorker(ctx, endpoint, f"{prefix}w{n:03d}", pid=os.getpid(), cores=(0,), serves=serves) for n in range(workers)]
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
        stop_processes([self.workers, self.proc], timeout=60)


def start_gateway(run_dir: Path, workers: int, *flags: str) -> InstantGateway:
    """`jevfleet gateway` (with extra settings flags) and `workers` instant workers, ready."""
    run_dir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    log_path = run_dir / "gateway.log"
    with log_path.open("w") as log:
        proc = subprocess.Popen([sys.executable, "-m", "jevfleet", "gateway", "--port", str(port), "--workers",
                                 str(workers), "--run-dir", str(run_dir), *flags],
                                cwd=PROJECT_ROOT, stdout=log, stderr=subprocess.STDOUT)
        stand_in = subprocess.Popen([sys.executable, "-m", "bench.instant_worker", "--endpoint",
                                     f"ipc://{run_dir}/workers.ipc", "--workers", str(workers)],
                                    cwd=PROJECT_ROOT, stdout=log, stderr=subprocess.STDOUT)
    gateway = InstantGateway(f"http://127.0.0.1:{port}", proc, stand_in)
    try:
        wait_healthy(gateway.url, proc=proc, logs=lambda: log_path.read_text()[-3000:])
    except BaseException:
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
