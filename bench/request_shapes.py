"""One request at a time, by one light client, to a 1-worker fleet: what each request shape costs.

    make bench-shapes                     # or: python -m bench.request_shapes [--reps N]

Shapes, from loadtest/workloads.json: W1 (a new state, one question), W3 (a state the worker
holds as a snapshot, one question), a W4 request (20 questions about one state) and a W4
255-option choice (the question repeated before each option). Per shape it prints the median
wall time and the Server-Timing tokenize and inference phases. Written for issue 12: to compare
two commits, run it on each (nothing else running) and quote both with the load average. Not
run by the tests.
"""
from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from jevfleet.harness.fleet import start_fleet
from jevfleet.harness.net import KeptConnection, server_timing
from loadtest import workloads
from loadtest.workloads import Item


def one_at_a_time(url: str, items: list[Item], client: KeptConnection | None = None) -> list[dict[str, float]]:
    """Each item's decision request in turn, on one kept connection (`client`, or one for this
    call): its wall ms (the body already encoded) and its Server-Timing phases."""
    conn = client or KeptConnection(url)
    rows = []
    try:
        for item in items:
            body = workloads.decision_body(item)
            start = time.perf_counter()
            status, headers, answer = conn.post_json("/v1/systemone", body)
            assert status == 200, answer
            rows.append(dict(server_timing(headers), wall=(time.perf_counter() - start) * 1000))
    finally:
        if client is None:
            conn.close()
    return rows


def shapes(reps: int) -> dict[str, tuple[list[Item], int]]:
    """name -> (the requests sent in turn, how many of the first answers are not counted)."""
    w4 = workloads.load("W4")
    return {"W1": (list(workloads.load("W1")[: reps + 5]), 5),
            "W3": (list(workloads.load("W3")[: reps + 10]), 10),  # the first 5 read their states
            "W4, 20 questions": ([next(i for i in w4 if not i.options)] * (max(2, reps // 5) + 1), 1),
            "W4, 255 options": ([next(i for i in w4 if i.options)] * (max(2, reps // 10) + 1), 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=40, help="W1/W3 requests counted (fewer of the long shapes)")
    args = parser.parse_args()
    print(f"# python -m bench.request_shapes --reps {args.reps}  (load average {os.getloadavg()[0]:.2f})")
    print(f"{'shape':<20}{'requests':>9}{'wall ms':>10}{'tokenize':>10}{'inference':>11}")
    with tempfile.TemporaryDirectory() as tmp:
        fleet = start_fleet(Path(tmp), workers=1)
        try:
            for name, (items, skip) in shapes(args.reps).items():
                rows = one_at_a_time(fleet.url, items)[skip:]
                p50 = {key: statistics.median(r[key] for r in rows) for key in ("wall", "tokenize", "inference")}
                print(f"{name:<20}{len(rows):>9}{p50['wall']:>10.1f}{p50['tokenize']:>10.2f}"
                      f"{p50['inference']:>11.1f}", flush=True)
        finally:
            fleet.stop()
    print(f"(load average {os.getloadavg()[0]:.2f} at the end)")


if __name__ == "__main__":
    main()
