"""Scaling benchmark: the same closed-loop load against fleets of different shapes.

On this 2-core machine the question is 1 worker × 2 threads against 2 workers × 1 thread
(each pinned to its own core). On a bigger machine pass e.g. --shapes 1x2,2x2,4x2,8x2.
Every shape gets a fresh fleet, a warm-up, then `clients` threads that each send their next
request as soon as the previous one is answered, for `duration` seconds. Distinct states, so
this measures reading throughput, not the prefix cache.

    make bench-scaling                    # full run
    make bench-scaling BENCH_ARGS=--quick # a short run that proves it works
"""
from __future__ import annotations

import argparse
import tempfile
import threading
import time
from pathlib import Path

from jevfleet.harness.fleet import start_fleet
from jevfleet.harness.load import closed_loop, decision, post, states
from jevfleet.harness.stats import percentile


def measure(workers: int, threads: int, *, clients: int, duration: float, warmup: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="jev-scaling-") as run_dir:
        fleet = start_fleet(Path(run_dir), workers=workers, extra=["--cores-per-worker", str(threads)])
        try:
            payloads = [decision(s) for s in states(256, tag=f"{workers}x{threads} ")]
            for p in payloads[-warmup:]:  # every worker has read real requests
                post(fleet.url, p)
            stop = threading.Event()
            timer = threading.Timer(duration, stop.set)
            started = time.monotonic()
            timer.start()
            outcomes = closed_loop(fleet.url, payloads[:-warmup], clients, stop)
        finally:
            fleet.stop()
    ok = [o for o in outcomes if o.status == 200]
    in_window = [o for o in ok if o.ended <= started + duration]  # not the tail after the stop
    latencies = [o.ended - o.started for o in ok]
    return {"shape": f"{workers} × {threads} thread{'s' if threads > 1 else ''}", "requests": len(outcomes),
            "errors": len(outcomes) - len(ok), "req_s": len(in_window) / duration,
            "p50_ms": percentile(latencies, 0.5) * 1000, "p99_ms": percentile(latencies, 0.99) * 1000}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default="1x2,2x1", help="WORKERSxTHREADS,... (default 1x2,2x1)")
    parser.add_argument("--clients", type=int, default=4, help="closed-loop client threads (default 4)")
    parser.add_argument("--duration", type=float, default=60.0, help="seconds of load per shape (default 60)")
    parser.add_argument("--quick", action="store_true", help="15 s per shape: proves the script works")
    args = parser.parse_args()
    duration = 15.0 if args.quick else args.duration
    rows = []
    for shape in args.shapes.split(","):
        workers, threads = (int(x) for x in shape.lower().split("x"))
        rows.append(measure(workers, threads, clients=args.clients, duration=duration, warmup=2 * workers))
        print(f"measured {rows[-1]['shape']}", flush=True)
    print(f"\nclosed loop, {args.clients} clients, {duration:.0f} s per shape, distinct states\n")
    print(f"{'workers × threads':<20}{'requests':>9}{'errors':>8}{'req/s':>8}{'p50 ms':>9}{'p99 ms':>9}")
    for r in rows:
        print(f"{r['shape']:<20}{r['requests']:>9}{r['errors']:>8}{r['req_s']:>8.2f}{r['p50_ms']:>9.0f}{r['p99_ms']:>9.0f}")


if __name__ == "__main__":
    main()
