"""Latency of the README's curl example against a fleet this script starts (1 worker).

    .venv/bin/python -m bench.latency [--n 30]

Prints wall-clock p50/p90/p99 over N sequential requests and the Server-Timing phases' medians,
plus the worker's resident memory.
"""
from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from tests.fleet import post_json, start_fleet

EXAMPLE = {
    "model": "jev-latest",
    "state": "I was charged twice for the same order.",
    "questions": {"billing": {"type": "noul", "instructions": "Is this a billing problem?"}},
}


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=30, help="requests to time (default 30)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        started = time.monotonic()
        fleet = start_fleet(Path(tmp), workers=1)
        print(f"fleet ready in {time.monotonic() - started:.1f} s")
        try:
            walls, phases = [], {}
            post_json(fleet.url + "/v1/systemone", EXAMPLE)  # not timed: first connection
            for _ in range(args.n):
                t = time.perf_counter()
                status, headers, body = post_json(fleet.url + "/v1/systemone", EXAMPLE)
                walls.append((time.perf_counter() - t) * 1000)
                assert status == 200, body
                for part in headers["Server-Timing"].split(", "):
                    name, dur = part.split(";dur=")
                    phases.setdefault(name, []).append(float(dur))
            _, health = fleet.health()
            worker_pid = health["workers"][0]["pid"]
            print(f"README example, {args.n} sequential requests, input_tokens={body['usage']['input_tokens']}")
            print(f"wall ms: p50 {pct(walls, .5):.0f}  p90 {pct(walls, .9):.0f}  p99 {pct(walls, .99):.0f}")
            print("Server-Timing medians (ms): " + json.dumps({k: round(statistics.median(v), 2) for k, v in phases.items()}))
            print(f"worker RSS: {rss_mb(worker_pid):.0f} MB")
        finally:
            fleet.stop()


if __name__ == "__main__":
    main()
