"""How many workers one gateway can feed: drive gateway processes whose workers answer at once
(bench/instant_worker.py, real ZeroMQ, no model) with closed-loop clients at rising concurrency,
and find where answers/s stop growing. Request kinds: W1-like (a short distinct state, one
question), 20 questions on a short distinct state (the same questionnaire every time), a state
of 250 KB (the largest the wire format accepts: 256 KB) with one question, and a 1 MB state,
which the gateway must refuse (422) — measured for what the refusal costs.

For each kind and concurrency it prints answers/s, client round trip and gateway time
(Server-Timing total) p50/p99, and the gateway processes' CPU per answer; the ceiling divided
by one real worker's W1 rate (--worker-rate) is the number of workers one gateway can feed.
With --gateways N it runs N gateways (each with its own workers, as behind HAProxy) and spreads
the clients over them, to show whether gateways add up on this machine.

    .venv/bin/python -m bench.gateway_ceiling [--kinds w1,20q,250kb,1mb] [--concurrency 1,4,16,64] [--gateways 1,2]
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp

from bench.instant_worker import InstantGateway, start_gateway
from client.net import server_timing
from jevfleet.harness.stats import percentile

# One default worker (2 cores) on W1 at 8 closed-loop users: README, `make loadtest`.
WORKER_W1_RATE = 8.22
STATE = "Ticket {i}: order #{i} arrived late and broken, and the customer asks for money back."


STATE_BYTES = {"250kb": 250_000, "1mb": 1_000_000}
FILLER = "The customer described the delivery, the packaging and the courier in detail. "


def body(i: int, kind: str) -> bytes:
    state = STATE.format(i=i)
    if kind in STATE_BYTES:
        state += " " + FILLER * (STATE_BYTES[kind] // len(FILLER) - 1)
    n = 20 if kind == "20q" else 1
    questions = {f"q{k:02d}": {"type": "noul", "instructions": f"Does the customer mention point {k}?"}
                 for k in range(n)}
    return json.dumps({"model": "jev-latest", "state": state, "questions": questions}).encode()


def start_ceiling_gateway(run_dir: Path, workers: int) -> InstantGateway:
    """The context limit raised so that a large state is read (only the gateway checks it here),
    and queues that never refuse: the gateway's own ceiling, not its backpressure."""
    return start_gateway(run_dir, workers, "--ctx", str(1 << 21), "--queue-requests", "1000",
                         "--queue-tokens", str(1 << 30))


@dataclass
class Run:
    answers: int = 0
    refused: int = 0
    round_trip_ms: list[float] = field(default_factory=list)
    gateway_ms: list[float] = field(default_factory=list)


async def closed_loop(urls: list[str], bodies: list[bytes], clients: int, seconds: float) -> Run:
    """`clients` loops, client k on gateway k mod N, each sending its next request when the last
    is answered; only requests that end inside the window count."""
    run = Run()
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=300)) as session:
        end = time.perf_counter() + seconds

        async def client(k: int) -> None:
            url, i = urls[k % len(urls)] + "/v1/systemone", k
            while time.perf_counter() < end:
                start = time.perf_counter()
                async with session.post(url, data=bodies[i % len(bodies)],
                                        headers={"Content-Type": "application/json"}) as resp:
                    await resp.read()
                    timing = server_timing(resp.headers)
                    status = resp.status
                done = time.perf_counter()
                i += clients
                if done > end:
                    break
                if status != 200:
                    run.refused += 1
                    continue
                run.answers += 1
                run.round_trip_ms.append((done - start) * 1000)
                run.gateway_ms.append(timing["total"])

        await asyncio.gather(*(client(k) for k in range(clients)))
    return run


def measure(gateways: list[InstantGateway], bodies: list[bytes], clients: int, seconds: float) -> dict:
    urls = [g.url for g in gateways]
    asyncio.run(closed_loop(urls, bodies, clients, min(1.0, seconds)))  # warm connections and pools
    cpu0 = sum(g.cpu_s() for g in gateways)
    others0 = sum(g.workers_cpu_s() for g in gateways) + time.process_time()
    run = asyncio.run(closed_loop(urls, bodies, clients, seconds))
    cpu = sum(g.cpu_s() for g in gateways) - cpu0
    others = sum(g.workers_cpu_s() for g in gateways) + time.process_time() - others0
    return {
        "clients": clients, "answers/s": run.answers / seconds, "refused/s": run.refused / seconds,
        "rt p50": percentile(run.round_trip_ms, 0.5) if run.answers else 0,
        "rt p99": percentile(run.round_trip_ms, 0.99) if run.answers else 0,
        "gw p50": percentile(run.gateway_ms, 0.5) if run.answers else 0,
        "gw p99": percentile(run.gateway_ms, 0.99) if run.answers else 0,
        "cpu ms/answer": cpu * 1000 / max(1, run.answers or run.refused),
        "cores": (cpu + others) / seconds,  # gateways + clients + instant workers
    }


def report(kind: str, n_gateways: int, workers: int, rows: list[dict], worker_rate: float) -> str:
    head = (f"{'clients':>7} {'answers/s':>10} {'rt p50':>8} {'rt p99':>8} {'gw p50':>8} {'gw p99':>8} "
            f"{'cpu ms/ans':>10} {'refused/s':>9} {'cores busy':>10}")
    lines = [f"\n{kind}: {n_gateways} gateway(s), {workers} instant workers each", head, "-" * len(head)]
    for r in rows:
        lines.append(f"{r['clients']:>7} {r['answers/s']:>10.1f} {r['rt p50']:>8.2f} {r['rt p99']:>8.2f} "
                     f"{r['gw p50']:>8.2f} {r['gw p99']:>8.2f} {r['cpu ms/answer']:>10.2f} {r['refused/s']:>9.1f} {r['cores']:>10.2f}")
    if not any(r["answers/s"] for r in rows):
        best = max(rows, key=lambda r: r["refused/s"])
        lines.append(f"all refused: up to {best['refused/s']:.1f} refusals/s, "
                     f"{best['cpu ms/answer']:.2f} ms gateway CPU each (cpu ms/ans column: per refusal)")
        return "\n".join(lines)
    best = max(rows, key=lambda r: r["answers/s"])
    cpu = min(r["cpu ms/answer"] for r in rows)
    lines.append(f"ceiling {best['answers/s']:.1f} answers/s at {best['clients']} clients = "
                 f"{best['answers/s'] / worker_rate:.0f} workers' worth at {worker_rate} W1 answers/s per worker; "
                 f"{cpu:.2f} ms gateway CPU per answer = {1000 / cpu:.0f} answers/s per gateway core")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kinds", default="w1,20q,250kb,1mb", help="request kinds (default w1,20q,250kb,1mb)")
    parser.add_argument("--concurrency", default="1,2,4,8,16,32,64", help="closed-loop clients (default 1..64)")
    parser.add_argument("--gateways", default="1", help="gateway process counts to run, e.g. 1,2 (default 1)")
    parser.add_argument("--workers", type=int, default=64, help="instant workers per gateway (default 64)")
    parser.add_argument("--seconds", type=float, default=8.0, help="measured seconds per step (default 8)")
    parser.add_argument("--worker-rate", type=float, default=WORKER_W1_RATE,
                        help=f"one real worker's W1 answers/s (default {WORKER_W1_RATE}, README)")
    args = parser.parse_args()
    kinds = args.kinds.split(",")
    concurrency = [int(c) for c in args.concurrency.split(",")]
    print(f"machine: {os.cpu_count()} cores; {os.uname().machine}; load average at start "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    for n in (int(g) for g in args.gateways.split(",")):
        with tempfile.TemporaryDirectory() as tmp:
            gateways = []
            try:
                for k in range(n):
                    gateways.append(start_ceiling_gateway(Path(tmp) / f"gw{k}", args.workers))
                for kind in kinds:
                    bodies = [body(i, kind) for i in range(8 if kind in STATE_BYTES else 256)]
                    steps = [c for c in concurrency if c >= n]
                    rows = [measure(gateways, bodies, c, args.seconds) for c in steps]
                    print(report(kind, n, args.workers, rows, args.worker_rate), flush=True)
            finally:
                for g in gateways:
                    g.stop()
    print(f"\nload average at end {' '.join(f'{x:.2f}' for x in os.getloadavg())} "
          "(the clients run on the same cores as the gateways)")
    print("cpu ms/ans: the gateway processes' CPU per answer; cores busy: gateways + clients + instant workers")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
