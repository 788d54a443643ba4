"""A throughput-vs-latency sweep: headless Locust once per user count, per target, in one run.

    python -m loadtest.sweep --host http://127.0.0.1:8017 --users 1,2,4,8,16 --duration 60s \
        --workload W1 --target both --rounds 3 --out DIR

Every target is measured on the same machine, GGUF, thread count and prompts:
  jevfleet          our fleet at --host, or one the sweep starts (and stops) when --host is absent
  jevfleet-fast     a fleet the sweep starts with --mode fast (micro-batches of any size, no
                    determinism guarantee): what the deterministic default costs
  jevfleet-per-core a fleet the sweep starts with --cores-per-worker 1: one one-thread worker
                    per core instead of the default one worker per two cores
  jevfleet-big-cells a fleet with --state-cache 64 --state-cache-mb 576 (32,768 tokens): the cell cache
                    of the release before states were kept in host memory
  llama-cpp-python  `python -m llama_cpp.server` on the same GGUF, started and stopped here
  llama-server      llama.cpp's server, built on first use into the cache dir (loadtest/llama_server.py)
`both` = jevfleet + llama-cpp-python; `all` is every target. All targets are started first and
stay up (idle when not measured). Each cell (workload × user count) then runs every target in
turn, --rounds times, the order reversed every other round (A B, B A, ...), so that the speed of
this machine, which drifts by tens of percent over minutes, falls on every target alike; a
cell's row pools its rounds (answers summed, percentiles over every answer). Each target gets a
short unmeasured warm-up run per workload first, and every run ends once one probe request has
been answered (so work abandoned when Locust stops lands in neither the next target's run nor
the next round). DIR gets results.md, throughput_latency.png (rewritten after every cell, so an
interrupted sweep keeps what it measured), rows.json and the logs of every Locust run and server.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import subprocess
import sys
import time
from collections import Counter
from contextlib import AbstractContextManager, ExitStack, nullcontext
from dataclasses import asdict, replace
from pathlib import Path
from typing import Callable, Mapping

from tqdm import tqdm

from client.net import probe, retry_after
from loadtest import fleet_metrics, fresh, results, servers
from loadtest.llama_server import ensure_llama_server
from loadtest.protocols import PROTOCOLS
from shared.config import PROJECT_ROOT, load_settings
from shared.derive import render_profile, serving_profile
from shared.model_files import resolve_model

PROTOCOL_OF = {"jevfleet": "jevfleet", "jevfleet-fast": "jevfleet", "jevfleet-per-core": "jevfleet",
               "jevfleet-big-cells": "jevfleet", "llama-cpp-python": "llama-cpp-python",
               "llama-server": "llama-server"}  # the API each speaks
FLEET_FLAGS = {"jevfleet-fast": ("--mode", "fast"), "jevfleet-per-core": ("--cores-per-worker", "1"),
               # the cell cache before host memory came (docs/benchmarks.md compares the two)
               "jevfleet-big-cells": ("--state-cache", "64", "--state-cache-mb", "576")}
TARGETS = tuple(PROTOCOL_OF)
ALIASES = {"both": ("jevfleet", "llama-cpp-python"), "all": TARGETS}
USER_CLASS = {"jevfleet": "JevfleetUser", "llama-cpp-python": "LlamaCppPythonUser", "llama-server": "LlamaServerUser"}
LOCUSTFILE = Path(__file__).with_name("locustfile.py")
SETTLE_TIMEOUT_S = 600.0


def settled(send: Callable[[], tuple[int, Mapping[str, str]]], within_s: float,
            wait: Callable[[float], None] = time.sleep) -> int:
    """The status of `send()` once it is not a shed (429/503), or the last one at the deadline.
    A backlog the probe must wait behind can fill the server's queue, and a shed answer comes at
    once: taking it as settled would start the next cell on the backlog. Waits the Retry-After
    the server gives between tries (1 s without one)."""
    deadline = time.monotonic() + within_s
    while True:
        status, headers = send()
        if status not in (429, 503) or time.monotonic() >= deadline:
            return status
        wait(min(max(1.0, retry_after(headers) or 1.0), max(0.0, deadline - time.monotonic())))


def seconds(text: str) -> int:
    """'60s', '2m', '1h30m' or a bare number of seconds."""
    text = text.strip().lower()
    if text.isdigit():
        return int(text)
    total, number = 0, ""
    for ch in text:
        if ch.isdigit():
            number += ch
        elif ch in "hms" and number:
            total += int(number) * {"h": 3600, "m": 60, "s": 1}[ch]
            number = ""
        else:
            raise argparse.ArgumentTypeError(f"not a duration: {text!r} (use e.g. 60s, 2m)")
    if number or not total:
        raise argparse.ArgumentTypeError(f"not a duration: {text!r} (use e.g. 60s, 2m)")
    return total


def durations(text: str) -> dict[str, int]:
    """'20s' for every workload, or '20s,W4=60s': per-workload times after the default (60 s if
    none is given). W4's 255-option choice comes once in 20 requests and takes seconds, so a W4
    cell needs a longer window than W1's or W3's to hold a fair share of them."""
    chosen = {"": 60}
    for part in text.split(","):
        name, _, value = part.strip().rpartition("=")
        if name and name not in fresh.names():
            raise argparse.ArgumentTypeError(f"unknown workload {name!r} in {text!r}; the file has "
                                             f"{', '.join(fresh.names())}")
        chosen[name] = seconds(value)
    return chosen


def user_counts(text: str) -> list[int]:
    try:
        counts = [int(u) for u in text.split(",") if u.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a comma-separated list of user counts: {text!r}") from None
    if not counts or min(counts) < 1:
        raise argparse.ArgumentTypeError("user counts must be positive integers")
    return counts


def rounds(text: str) -> int:
    if not text.strip().isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"rounds must be a positive integer, not {text!r}")
    return int(text)


def target_list(text: str) -> list[str]:
    chosen: list[str] = []
    for part in text.split(","):
        for name in ALIASES.get(part.strip(), (part.strip(),)):
            if name not in TARGETS:
                raise argparse.ArgumentTypeError(f"unknown target {name!r}; choose from "
                                                 f"{', '.join(TARGETS + tuple(ALIASES))}")
            if name not in chosen:
                chosen.append(name)
    return chosen


def workload_list(text: str) -> list[str]:
    names = [w.strip() for w in text.split(",") if w.strip()]
    unknown = [w for w in names if w not in fresh.names()]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"unknown workload {unknown}; the file has {', '.join(fresh.names())}")
    return names


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m loadtest.sweep", description=__doc__.split("\n\n")[0])
    p.add_argument("--host", default="", help="URL of a running jevfleet gateway; absent: start one")
    p.add_argument("--users", type=user_counts, default=[1, 2, 4, 8, 16], help="comma-separated user counts")
    p.add_argument("--duration", type=durations, default={"": 60},
                   help="measured time per user count (60s, 2m); per workload: 20s,W4=60s")
    p.add_argument("--rounds", type=rounds, default=1,
                   help="runs of each target per cell, interleaved (A B, B A, ...) and pooled")
    p.add_argument("--warmup", type=seconds, default=5, help="unmeasured run before each target × workload")
    p.add_argument("--workload", type=workload_list, default=["W1"], help="W1, W2, W3, W4 (repeat-heavy), W1-fresh, W3-fresh, W4-fresh, repeats (loadtest/fresh.py) or a comma list")
    p.add_argument("--target", type=target_list, default=["jevfleet"],
                   help=f"{', '.join(TARGETS)}, both (jevfleet + llama-cpp-python), all, or a comma list")
    p.add_argument("--out", type=Path, required=True, help="directory for results.md, the plot and logs")
    p.add_argument("--threads", type=int, default=servers.BASELINE_THREADS,
                   help="threads for the baselines (our workers use their pinned cores)")
    p.add_argument("--baseline-ctx", type=int, default=servers.BASELINE_CTX,
                   help="context per sequence for the baselines (llama-cpp-python allocates ctx × vocab logits)")
    p.add_argument("--slots", type=int, default=servers.SLOTS, help="llama-server parallel slots (-np)")
    p.add_argument("--llama-server", type=Path, default=None, help="a llama-server binary; default: build/cache one")
    return p.parse_args(argv)


def can_run(target: str, workload: str) -> bool:
    """False for a server that takes one prompt per call (llama-cpp-python) and a workload
    whose requests ask many questions (W4): it could not be given the same work in one call."""
    return PROTOCOLS[PROTOCOL_OF[target]].many_prompts or all(
        len(item.question_ids) == 1 and not item.options for item in fresh.sample(workload))


def machine() -> str:
    model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")), platform.processor() or "unknown CPU")
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    return f"{os.cpu_count()} CPUs ({model}), {platform.system()} {platform.release()}; load average at start {load}"


class Sweep:
    def __init__(self, args: argparse.Namespace, command: str) -> None:
        self.args = args
        self.command = command
        self.out: Path = args.out
        self.logs = self.out / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.rows: list[results.Row] = []
        self.machine = machine()
        settings = load_settings()
        self.cache = settings.cache_path
        self.profile = serving_profile(settings)
        # the profile file Locust renders the baselines' prompts from: a derived one's rendering (its
        # source is the GGUF, which load_profile cannot read)
        self.profile_file = render_profile(self.profile, self.cache) if self.profile.derived else self.profile.source
        self.gguf = resolve_model(self.profile, settings.cache_path, settings.model)
        self.runs_total = sum(can_run(t, w) for t in args.target for w in args.workload) * len(args.users) * args.rounds
        self.runs_done = 0
        self.slots = 0  # ranges of fresh items handed out so far (next_start)

    def next_start(self) -> int:
        """The first fresh item of the next round of runs: a range of its own, RUN_STRIDE wide,
        given to every target of that round, so they get the same prompts and no run repeats
        another's (loadtest/fresh.py)."""
        self.slots += 1
        return (self.slots - 1) * fresh.RUN_STRIDE

    def duration(self, workload: str) -> int:
        """Measured seconds of one run of `workload` (--duration)."""
        return self.args.duration.get(workload, self.args.duration[""])

    def server(self, target: str) -> AbstractContextManager[str]:
        a = self.args
        if target == "jevfleet":
            return nullcontext(a.host.rstrip("/")) if a.host else servers.jevfleet(self.logs)
        if target in FLEET_FLAGS:
            return servers.jevfleet(self.logs, target, FLEET_FLAGS[target])
        if target == "llama-cpp-python":
            return servers.llama_cpp_python(self.gguf, self.logs, threads=a.threads, ctx=a.baseline_ctx)
        binary = a.llama_server or ensure_llama_server(self.cache)
        return servers.llama_server(binary, self.gguf, self.logs, threads=a.threads, ctx=a.baseline_ctx,
                                    slots=a.slots)

    def run(self) -> list[results.Row]:
        a = self.args
        print(f"sweep: {', '.join(a.target)} × {', '.join(a.workload)} × users {a.users}, "
              f"{a.rounds} × {', '.join(f'{w} {self.duration(w)}s' for w in a.workload)} each → {self.out}\n"
              f"machine: {self.machine}", flush=True)
        with ExitStack() as servers_up:
            urls: dict[str, str] = {}
            for target in a.target:
                print(f"[{target}] starting", flush=True)
                urls[target] = servers_up.enter_context(self.server(target))
                print(f"[{target}] serving at {urls[target]}", flush=True)
            for workload in a.workload:
                targets = [t for t in a.target if can_run(t, workload)]
                for target in set(a.target) - set(targets):
                    print(f"[{target}] skips {workload}: it takes one prompt per call", flush=True)
                if a.warmup:
                    start = self.next_start()
                    for target in targets:
                        self.locust(target, urls[target], workload, users=1, duration=a.warmup, tag="warmup",
                                    start=start)
                for users in a.users:
                    self.measure(targets, urls, workload, users)
        print("servers stopped", flush=True)
        return self.rows

    def measure(self, targets: list[str], urls: dict[str, str], workload: str, users: int) -> None:
        """One cell: every target `rounds` times, interleaved; one pooled row per target."""
        runs: dict[str, list[Path]] = {t: [] for t in targets}
        metrics: dict[str, Counter] = {t: Counter() for t in targets}  # /metrics growth over the runs
        for r in range(self.args.rounds):
            start = self.next_start()
            for target in targets if r % 2 == 0 else targets[::-1]:
                self.runs_done += 1
                ours = PROTOCOL_OF[target] == "jevfleet"  # our fleet: its /metrics split the time
                before = fleet_metrics.scrape(urls[target]) if ours else {}
                runs[target].append(self.locust(target, urls[target], workload, users=users,
                                                duration=self.duration(workload), tag=f"{self.runs_done}/{self.runs_total}",
                                                round_=r + 1, start=start))
                if ours:
                    metrics[target].update(fleet_metrics.growth(before, fleet_metrics.scrape(urls[target])))
        for target in targets:
            row = results.row_from_locust_json(runs[target], target=target, workload=workload, users=users,
                                               seconds=self.duration(workload) * self.args.rounds)
            split = fleet_metrics.breakdown(metrics[target]) if metrics[target] else None
            if split is not None:
                row = replace(row, queue_ms=split.queue_ms, inference_ms=split.inference_ms, batch=split.batch)
            self.rows.append(row)
            print(f"    {target} {workload} users={users}: {row.answered} answers, {row.rps:.2f} req/s, "
                  f"{row.qps:.2f} answers/s, p50 {row.p50_ms:.0f} ms, p99 {row.p99_ms:.0f} ms, "
                  f"errors {row.errors}, shed {row.shed}, L=λW {row.littles_l:.2f}", flush=True)
        self.write()

    def settle(self, target: str, url: str, workload: str) -> None:
        """Send one request and wait for its answer. When Locust stops a run it abandons the
        requests in flight, and a server may still work them off (a running batch cannot be
        cancelled); on a FIFO server this probe's answer comes after that backlog."""
        protocol = PROTOCOLS[PROTOCOL_OF[target]]
        body = json.dumps(protocol.body(self.profile, fresh.sample(workload, 1)[0])).encode()
        status = settled(lambda: probe("POST", url + protocol.path, body, {"Content-Type": "application/json"},
                                       SETTLE_TIMEOUT_S)[:2], SETTLE_TIMEOUT_S)
        if status != 200:
            print(f"    warning: settle probe got status {status}", flush=True)

    def locust(self, target: str, url: str, workload: str, *, users: int, duration: int, tag: str,
               round_: int = 1, start: int = 0) -> Path:
        """One headless Locust run, ended by a settle probe; returns its JSON stats file."""
        name = f"{target}-{workload}-u{users}" + ("-warmup" if tag == "warmup" else f"-r{round_}" * (round_ > 1))
        stats, log_path = self.logs / f"{name}.json", self.logs / f"{name}.log"
        cmd = [sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), "--headless", "--only-summary",
               "--users", str(users), "--spawn-rate", str(users), "--run-time", f"{duration}s",
               "--host", url, "--workload", workload, "--start", str(start), "--model-profile", str(self.profile_file),
               "--json-file", str(stats.with_suffix("")),
               "--loglevel", "WARNING", USER_CLASS[PROTOCOL_OF[target]]]
        python_path = os.pathsep.join(filter(None, [str(PROJECT_ROOT), os.environ.get("PYTHONPATH")]))
        env = {**os.environ, "PYTHONPATH": python_path}
        desc = f"[{tag}] {target} {workload} users={users}"
        if not sys.stdout.isatty():  # no progress bar in a log: one line per run
            print(f"{desc}, {duration}s", flush=True)
        with log_path.open("w") as log:
            proc = subprocess.Popen(cmd, cwd=PROJECT_ROOT, stdout=log, stderr=subprocess.STDOUT, env=env)
            with tqdm(total=duration, desc=desc, unit="s", bar_format="{desc}: {bar} {n:.0f}/{total}s",
                      file=sys.stdout, disable=None) as bar:
                start = time.monotonic()
                while proc.poll() is None:
                    time.sleep(0.5)
                    bar.n = min(duration, time.monotonic() - start)
                    bar.refresh()
        if proc.returncode not in (0, 1) or not stats.is_file():  # locust exits 1 when any request failed
            raise RuntimeError(f"locust failed ({proc.returncode}); see {log_path}:\n{log_path.read_text()[-2000:]}")
        self.settle(target, url, workload)
        return stats

    def write(self) -> None:
        rows = ordered(self.rows)
        results.write_results(rows, self.out, command=self.command, machine=self.machine)
        results.plot(rows, self.out)
        (self.out / "rows.json").write_text(json.dumps([asdict(r) for r in rows], indent=1))


def ordered(rows: list[results.Row]) -> list[results.Row]:
    """Targets side by side for each workload and user count."""
    return sorted(rows, key=lambda r: (r.workload, r.users, TARGETS.index(r.target)))


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    rows = Sweep(args, command="python -m loadtest.sweep " + shlex.join(argv)).run()
    print(f"\n{results.markdown_table(ordered(rows))}\n\nwrote {args.out / 'results.md'} and {args.out / 'throughput_latency.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
