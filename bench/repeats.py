"""The same requests sent again: what a server's prompt cache makes of repeats, ours and llama-server's.

    make bench NAME=repeats               # or: python -m bench repeats [--workload W4] [--requests 6] [--passes 3]

Each Locust run of `make loadtest` starts the workload at its first request, so a cell's rounds,
and the cells after it, send the same requests again: what the sweep measures depends on how
many of them a server still holds. This sends the first `--requests` requests of a workload one
at a time, `--passes` times over, to a default fleet and to llama-server (the sweep's command
line), and prints per pass the wall time and, for llama-server, the prompt tokens it read
(`timings.prompt_n`). llama-server keeps prompts in host memory (`--cache-ram`, 8 GiB by
default) and restores a repeated one; so do our workers (`state_cache_ram_mb`, worker/spill.py),
and a second fleet without that tier shows what it buys: there a state becomes a snapshot on its
second miss (worker/snapshots.py), read on the second pass and served from the third.
Not run by the tests; quote it with the load average.
"""
from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from client.net import post_json
from loadtest import servers, workloads
from loadtest.llama_server import ensure_llama_server
from loadtest.protocols import PROTOCOLS
from shared.config import Settings
from shared.derive import serving_profile
from shared.model_files import resolve_model
from shared.profiles import Profile


def passes(url: str, target: str, profile: Profile, items: list[workloads.Item], n: int) -> list[tuple[float, int]]:
    """n passes over items, one request at a time: (seconds, prompt tokens read or -1) per pass."""
    protocol = PROTOCOLS[target]
    out = []
    for _ in range(n):
        start, read = time.perf_counter(), 0
        for item in items:
            status, _, answers = post_json(url + protocol.path, protocol.body(profile, item), timeout=600)
            assert status == 200, answers
            if target == "llama-server":
                read += sum(a["timings"]["prompt_n"] for a in (answers if isinstance(answers, list) else [answers]))
        out.append((time.perf_counter() - start, read if target == "llama-server" else -1))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workload", default="W4", choices=workloads.names())
    parser.add_argument("--requests", type=int, default=6, help="distinct requests a pass")
    parser.add_argument("--passes", type=int, default=3)
    args = parser.parse_args()
    items = list(workloads.load(args.workload)[: args.requests])
    settings = Settings()
    profile = serving_profile(settings)
    gguf = resolve_model(profile, settings.cache_path, settings.model)
    print(f"# python -m bench.repeats --workload {args.workload} --requests {args.requests} --passes {args.passes}"
          f"  (load average {os.getloadavg()[0]:.2f})")
    with tempfile.TemporaryDirectory() as tmp:
        logs = Path(tmp)
        ours = servers.jevfleet(logs)
        no_ram = servers.jevfleet(logs, "jevfleet-no-ram", ("--state-cache-ram-mb", "0"))
        theirs = servers.llama_server(ensure_llama_server(settings.cache_path), gguf, logs,
                                      threads=servers.BASELINE_THREADS, ctx=servers.BASELINE_CTX, slots=servers.SLOTS)
        for name, target, server in (("jevfleet", "jevfleet", ours), ("no host memory", "jevfleet", no_ram),
                                     ("llama-server", "llama-server", theirs)):
            with server as url:
                for k, (seconds, read) in enumerate(passes(url, target, profile, items, args.passes), 1):
                    tokens = f", {read} prompt tokens read" if read >= 0 else ""
                    print(f"{name:<14} pass {k}: {seconds:7.2f} s, {seconds / len(items) * 1000:7.0f} ms a request"
                          f"{tokens}", flush=True)
    print(f"(load average {os.getloadavg()[0]:.2f} at the end)")


if __name__ == "__main__":
    main()
