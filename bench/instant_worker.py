"""Workers that answer every request at once: real DEALER sockets speaking the real messages
(shared/messages.py), no model. Benchmarks use them to measure the gateway alone, with as many
registered workers as a big fleet would have. A benchmark stand-in, never part of the product.

    .venv/bin/python -m bench.instant_worker --endpoint ipc:///tmp/x/workers.ipc --workers 64
"""
from __future__ import annotations

import argparse
import asyncio
import os
import signal

import zmq
import zmq.asyncio

from shared.messages import Score, decode
from tests.fake_worker import FakeWorker

HEARTBEAT_S = 0.5  # the fleet's default heartbeat period


async def answer_forever(worker: FakeWorker) -> None:
    """Answer each Score with zero margins as soon as it arrives; ignore Ping and Cancel."""
    while True:
        msg = decode(await worker.sock.recv())
        if isinstance(msg, Score):
            await worker.answer(msg, margin=0.0, read=0, run_ms=0.0)


async def serve(endpoint: str, workers: int, prefix: str) -> None:
    ctx = zmq.asyncio.Context()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    fleet = [FakeWorker(ctx, endpoint, f"{prefix}w{n:03d}", pid=os.getpid(), cores=(0,)) for n in range(workers)]
    for worker in fleet:
        await worker.start(beat_s=HEARTBEAT_S)
    tasks = [asyncio.create_task(answer_forever(w)) for w in fleet]
    await stop.wait()
    for task in tasks:
        task.cancel()
    for worker in fleet:
        worker.close()
    ctx.term()


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
