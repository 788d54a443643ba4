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

from jevfleet.harness.fleet import start_fleet
from jevfleet.harness.load import rss_kb
from jevfleet.harness.net import post_json, server_timing
from jevfleet.harness.stats import percentile

EXAMPLE = {
    "model": "jev-latest",
    "state": "I was charged twice for the same order.",
    "questions": {"billing": {"type": "noul", "instructions": "Is this a billing problem?"}},
}


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
                for name, ms in server_timing(headers).items():
                    phases.setdefault(name, []).append(ms)
            _, health = fleet.health()
            worker_pid = health["workers"][0]["pid"]
            print(f"README example, {args.n} sequential requests, input_tokens={body['usage']['input_tokens']}")
            print(f"wall ms: p50 {percentile(walls, .5):.0f}  p90 {percentile(walls, .9):.0f}  "
                  f"p99 {percentile(walls, .99):.0f}")
            print("Server-Timing medians (ms): " + json.dumps({k: round(statistics.median(v), 2) for k, v in phases.items()}))
            print(f"worker RSS: {rss_kb(worker_pid) / 1024:.0f} MB")
        finally:
            fleet.stop()


if __name__ == "__main__":
    main()
