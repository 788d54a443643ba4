"""Which way of reading the answer ranks best: every yes/no item of the evaluation set answered
once, llama.cpp finishing its output matmul, each reading's AUC per split and tag, and how far the
worker's hidden-state path is from llama.cpp's logits row (quality/readout.py says what is read).

    python -m bench.readout [--profile gemma-3-270m] [--set eval/...jsonl ...] [--limit N]

A choice of reading is made on the fit split; the test split is what docs/quality.md reports.
"""
from __future__ import annotations

import argparse
import dataclasses
import time

from jevfleet.cli import QUALITY_SETS
from quality.evaluate import ask_all
from quality.items import load_set
from quality.local import LocalRunner
from quality.readout import collect, describe
from shared.config import load_settings
from shared.derive import serving_profile


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--profile", default="")
    parser.add_argument("--set", dest="set_path", nargs="+", default=list(QUALITY_SETS))
    parser.add_argument("--limit", type=int, default=0, help="only the first N yes/no items (a quick look)")
    args = parser.parse_args()
    settings = load_settings({"profile": args.profile or None})
    items = [i for i in load_set(args.set_path) if i.type == "noul"]
    items = items[:args.limit] if args.limit else items
    started = time.monotonic()
    runner = LocalRunner(settings, dataclasses.replace(serving_profile(settings, head=False)))
    try:
        readings = collect(runner, items, lambda r, its: ask_all(r, its, desc="readout"))
    finally:
        runner.close()
    print(f"profile {runner.profile.name}, {len(readings)} yes/no items, {time.monotonic() - started:.0f} s; AUC:")
    print(describe(readings))


if __name__ == "__main__":
    main()
