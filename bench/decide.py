"""decisions/s of `jevfleet decide --jsonl` against the same requests sent one by one to a
one-worker server, side by side in one run.

    .venv/bin/python -m bench.decide [--workload W3] [--lines 200]

W3 asks many questions about five long states (the best case for batching and snapshots);
W1 is short one-question requests. Requests come from loadtest/workloads.json.
"""
from __future__ import annotations

import argparse
import itertools
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from jevfleet.harness.fleet import start_fleet
from jevfleet.harness.net import post_json
from loadtest import workloads
from shared.config import PROJECT_ROOT


def requests(workload: str, lines: int) -> list[dict]:
    return [workloads.decision_body(item) for item in itertools.islice(itertools.cycle(workloads.load(workload)), lines)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", default="W3", choices=["W1", "W2", "W3"])
    parser.add_argument("--lines", type=int, default=200)
    args = parser.parse_args()
    reqs = requests(args.workload, args.lines)
    with tempfile.TemporaryDirectory() as tmp:
        tmpdir = Path(tmp)
        infile, outfile = tmpdir / "in.jsonl", tmpdir / "out.jsonl"
        infile.write_text("".join(json.dumps(r) + "\n" for r in reqs))
        started = time.monotonic()
        subprocess.run([sys.executable, "-m", "jevfleet", "decide", "--jsonl", str(infile), "--output",
                        str(outfile)], cwd=PROJECT_ROOT, check=True)
        offline_s = time.monotonic() - started

        fleet = start_fleet(tmpdir / "fleet", workers=1)
        try:
            started = time.monotonic()
            for r in reqs:
                status, _, body = post_json(fleet.url + "/v1/systemone", r)
                assert status == 200, body
            server_s = time.monotonic() - started
        finally:
            fleet.stop()
    print(f"\n{args.lines} {args.workload} requests, one noul question each")
    print(f"{'path':<44} {'seconds':>8} {'decisions/s':>12}")
    print(f"{'jevfleet decide --jsonl (in-process)':<44} {offline_s:>8.1f} {args.lines / offline_s:>12.2f}")
    print(f"{'one by one over HTTP, 1-worker server':<44} {server_s:>8.1f} {args.lines / server_s:>12.2f}")
    print(f"ratio: {server_s / offline_s:.2f}x  (decide includes its own model load)")


if __name__ == "__main__":
    main()
