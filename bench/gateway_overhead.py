"""Gateway-side overhead of one decision request: the Server-Timing phases parse, validate,
tokenize and respond (p50/p99), for a short request (the same one again, so its ids come from the
gateway's caches, and one with a new state each time, which is tokenized) and for a 1024-question
request.

By default it starts a real gateway process (`jevfleet gateway`) with a worker that answers
every job at once (bench/instant_worker.py), so the figures are the gateway's own work without
model time and many samples are cheap. With --url it measures a running fleet instead (the real model; use few
samples for the 1024-question request, each costs seconds of inference).

    .venv/bin/python -m bench.gateway_overhead [--short 300] [--large 30] [--url http://127.0.0.1:8017]
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from bench.instant_worker import start_gateway
from jevfleet.harness.net import KeptConnection, server_timing
from jevfleet.harness.stats import percentile

GATEWAY_PHASES = ("parse", "validate", "tokenize", "respond")
SHORT = {"model": "jev-latest", "state": "I was charged twice for the same order.", "questions": {
    "billing": {"type": "noul", "instructions": "Is this a billing problem?"},
    "team": {"type": "choice", "instructions": "Which team should handle it?",
             "criteria": {"billing": "payments, refunds", "tech": None}},
    "anger": {"type": "score", "instructions": "How upset is the customer?", "criteria": ["calm", "annoyed", "furious"]},
}}
LARGE = {**SHORT, "questions": {f"q{i:04d}": {"type": "noul", "instructions": f"Does the text mention item {i}?"}
                                for i in range(1024)}}


def new_states(n: int) -> list[dict]:
    """n short requests whose states differ (a number in the text), so none is in the gateway's
    prefix-id cache: each is tokenized, as an unseen state is."""
    return [{**SHORT, "state": f"Order {i}: I was charged twice for the same order."} for i in range(n)]


def measure(url: str, bodies: list[dict]) -> list[dict[str, float]]:
    """Server-Timing phases (ms) of the bodies sent in turn on one connection, plus the client's
    round trip."""
    client = KeptConnection(url, timeout=600)
    raws = [json.dumps(body).encode() for body in bodies]
    samples = []
    for raw in raws:
        start = time.perf_counter()
        status, headers, _ = client.post("/v1/systemone", raw)
        round_trip = (time.perf_counter() - start) * 1000
        if status != 200:
            raise RuntimeError(f"status {status}")
        phases = server_timing(headers)
        phases["overhead"] = sum(phases[p] for p in GATEWAY_PHASES)
        phases["round trip"] = round_trip
        samples.append(phases)
    client.close()
    return samples


def table(results: dict[str, list[dict[str, float]]]) -> str:
    rows = [*GATEWAY_PHASES, "overhead", "queue", "inference", "total", "round trip"]
    names = list(results)
    head = f"{'ms':<12}" + "".join(f"{f'{n} p50':>16}{f'{n} p99':>16}" for n in names)
    lines = [head, "-" * len(head)]
    for row in rows:
        cells = "".join(f"{percentile([s[row] for s in results[n]], 0.5):>16.2f}"
                        f"{percentile([s[row] for s in results[n]], 0.99):>16.2f}" for n in names)
        lines.append(f"{row:<12}{cells}")
    lines.append(f"{'samples':<12}" + "".join(f"{len(results[n]):>16}{'':>16}" for n in names))
    return "\n".join(lines)


def run(url: str, short: int, large: int) -> None:
    measure(url, [SHORT] * 3)  # warm connections, caches and the tokenizer pool
    results = {"short": measure(url, [SHORT] * short), "short, new": measure(url, new_states(short)),
               "1024 q": measure(url, [LARGE] * large)}
    print(table(results))
    print("overhead = parse + validate + tokenize + respond (gateway work, from Server-Timing)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="measure this running fleet instead of a gateway with an instant worker")
    parser.add_argument("--short", type=int, default=300, help="short requests to time (default 300)")
    parser.add_argument("--large", type=int, default=30, help="1024-question requests to time (default 30)")
    args = parser.parse_args()
    if args.url:
        run(args.url, args.short, args.large)
        return 0
    with tempfile.TemporaryDirectory() as run_dir:
        gateway = start_gateway(Path(run_dir), 1)
        try:
            print(f"gateway {gateway.url} with an instant worker (no model time)")
            run(gateway.url, args.short, args.large)
        finally:
            gateway.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
