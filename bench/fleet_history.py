"""Does what a fleet answered before slow what it answers next? W3 at 4 users on a fresh 1-worker
fleet against one that first answered W1 (100 distinct states, which fill and churn the snapshot
cache), in turns with the order alternating.

    make bench-history            # or: python -m bench.fleet_history [--rounds 3 --seconds 20]

Written for issue 12: a snapshot relocation used to start a new epoch, so after one eviction every
batch moved its snapshots again (worker/snapshots.py, _relocate), and the fleet that had served
W1 answered W3 at 0.87× the fresh one's rate. Prints req/s and the worker's inference time per
batch for each run, and the ratio of the means. Not run by the tests.
"""
from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import threading
from pathlib import Path

from jevfleet.harness.fleet import start_fleet
from jevfleet.harness.load import closed_loop
from loadtest import fleet_metrics, workloads


def load(url: str, workload: str, users: int, seconds: float) -> float:
    """Closed-loop requests of `workload` for `seconds`; answers (status 200) per second."""
    done = threading.Event()
    threading.Timer(seconds, done.set).start()
    outcomes = closed_loop(url, [workloads.decision_body(i) for i in workloads.load(workload)], users, done)
    return sum(o.status == 200 for o in outcomes) / seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--users", type=int, default=4)
    args = parser.parse_args()
    print(f"# python -m bench.fleet_history --rounds {args.rounds} --seconds {args.seconds:g} --users {args.users}"
          f"  (load average {os.getloadavg()[0]:.2f})", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        fleets = {"fresh": start_fleet(Path(tmp) / "fresh", workers=1),
                  "after W1": start_fleet(Path(tmp) / "after-w1", workers=1)}
        try:
            load(fleets["after W1"].url, "W1", 8, 25)
            for fleet in fleets.values():  # each reads W3's five states once
                load(fleet.url, "W3", 1, 5)
            rates: dict[str, list[float]] = {name: [] for name in fleets}
            for r in range(args.rounds):
                for name in list(fleets)[:: 1 if r % 2 == 0 else -1]:
                    url = fleets[name].url
                    before = fleet_metrics.scrape(url)
                    rate = load(url, "W3", args.users, args.seconds)
                    b = fleet_metrics.breakdown(fleet_metrics.growth(before, fleet_metrics.scrape(url)))
                    rates[name].append(rate)
                    print(f"{name:<9} W3 users={args.users}: {rate:6.2f} req/s, inference {b.inference_ms:.0f} ms "
                          f"a batch of {b.batch:.2f}  (load {os.getloadavg()[0]:.2f})", flush=True)
        finally:
            for fleet in fleets.values():
                fleet.stop()
    ratio = statistics.mean(rates["after W1"]) / statistics.mean(rates["fresh"])
    print(f"after W1 ÷ fresh: {ratio:.2f}")


if __name__ == "__main__":
    main()
