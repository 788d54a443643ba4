"""The limit as a figure: the engine alone on first-seen requests, back to back, beside the fleet
and llama-server on the same requests.

    make bench NAME=floor                 # or: python -m bench floor [--requests W1-fresh=60,...]

The floor is what this machine can do with our engine and nothing around it: the requests are
validated, rendered and tokenized before the clock starts (client/local.py's prepare), then
handed one at a time to a worker's scheduler and engine in this process (preamble pinned, the
default settings), each waited for before the next. No HTTP, no ZeroMQ, no gateway. The fleet
(`jevfleet serve` at its defaults) and llama-server (as the sweep starts it) get the same
requests over HTTP from one client on one kept connection, also one at a time.

Every request is first-seen to every target: each is a process of its own, started once, and
each workload's items come from one range of loadtest/fresh.py. All three are up at once and take
turns request by request (the same item to each, one after the other), so that a machine whose
speed drifts, as a shared VM's does, slows all three alike. A few warm-up requests from another
range go first. Per workload it prints answers/s (a W4-fresh request counts its 20 questions), the
p50 wall time, and each target's ratio to llama-server's answers/s, the reference (to the floor
when llama-server is not among the targets): the floor is ours, the target to beat is theirs.
Then where each target's time goes, p50 ms per phase: the fleet's Server-Timing phases (parse,
validate, tokenize, queue, inference, outside = the ZeroMQ link, respond), the floor's worker
queue and run, llama-server's own prompt and predicted times (its `timings`), and for each what
the client saw beyond them (HTTP, the client's reading). Not run by the tests; quote it with the
load average.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from contextlib import AbstractContextManager, ExitStack, contextmanager
from pathlib import Path
from typing import Callable, Iterator

from tqdm import tqdm

from client.local import LocalDecider
from client.net import KeptConnection, server_timing
from loadtest import fresh, servers
from loadtest.protocols import PROTOCOLS
from loadtest.workloads import Item, decision_body
from shared.config import load_settings
from shared.derive import serving_profile
from shared.profiles import Profile

REQUESTS = {"W1-fresh": 80, "W3-fresh": 100, "W4-fresh": 8}  # the run docs/benchmarks.md quotes
WARMUP = 3  # requests per workload before the timed ones, from WARMUP_START on
WARMUP_START = fresh.RUN_STRIDE - 1000  # a range the timed requests do not reach
TARGETS = ("floor", "jevfleet", "llama-server")

Send = Callable[[Item], tuple[float, dict[str, float]]]  # answers one request: its seconds and ms by phase


def llama_server_phases(body: object) -> dict[str, float]:
    """llama-server's own times of a /completion answer (one prompt, or each of a list's)."""
    answers = body if isinstance(body, list) else [body]
    return {f"server {name}": sum(a["timings"][f"{name}_ms"] for a in answers) for name in ("prompt", "predicted")}


@contextmanager
def floor_target() -> Iterator[Send]:
    """The engine alone: the request prepared first, then only the scheduler and engine timed."""
    decider = LocalDecider(load_settings())
    try:
        def send(item: Item) -> tuple[float, dict[str, float]]:
            prepared, tokens = decider.prepare(decision_body(item))
            start = time.perf_counter()
            answer = decider.submit(prepared, tokens).result()
            took = time.perf_counter() - start
            assert answer.status == 200, answer.body
            return took, {"queue": answer.result.queue_ms, "inference": answer.result.run_ms}
        yield send
    finally:
        decider.close()


@contextmanager
def http_target(name: str, profile: Profile, logs: Path) -> Iterator[Send]:
    """A server started fresh, one client on one kept connection; the body encoded before the clock."""
    server = servers.ours_or_llama_server(name, profile, logs)
    protocol = PROTOCOLS[name.removesuffix("-native")]
    with server as url:
        conn = KeptConnection(url, timeout=600)
        try:
            def send(item: Item) -> tuple[float, dict[str, float]]:
                body = json.dumps(protocol.body(profile, item)).encode()
                start = time.perf_counter()
                status, headers, raw = conn.post(protocol.path, body)
                took = time.perf_counter() - start
                assert status == 200, raw[:300]
                answer = json.loads(raw)
                protocol.check(answer, profile, item)
                return took, server_timing(headers) if name.startswith("jevfleet") else llama_server_phases(answer)
            yield send
        finally:
            conn.close()


def start(name: str, profile: Profile, logs: Path) -> AbstractContextManager[Send]:
    return floor_target() if name == "floor" else http_target(name, profile, logs / name)


def parse_requests(text: str) -> dict[str, int]:
    out = dict(REQUESTS)
    for part in filter(None, text.split(",")):
        workload, _, n = part.partition("=")
        if workload not in REQUESTS:
            raise SystemExit(f"--requests: {workload!r} is not one of {', '.join(REQUESTS)}")
        out[workload] = int(n)
    return {w: n for w, n in out.items() if n > 0}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", default="", help="per workload, e.g. W1-fresh=60,W4-fresh=0 (0 skips it)")
    parser.add_argument("--targets", default=",".join(TARGETS),
                        help=f"a subset of {','.join(TARGETS)}, or jevfleet-native / llama-server-native: the "
                             "fleet / llama-server on llama.cpp built for this CPU (what the portable build costs, "
                             "and the comparison on this CPU's own kernels; built once, ~2.5 / 10-20 min)")
    args = parser.parse_args()
    requests = parse_requests(args.requests)
    targets = [t for t in args.targets.split(",") if t]
    settings = load_settings()
    profile = serving_profile(settings)
    print(f"# python -m bench.floor --targets {','.join(targets)} "
          f"--requests {','.join(f'{w}={n}' for w, n in requests.items())}"
          f"  (load average {os.getloadavg()[0]:.2f})", flush=True)
    seconds: dict[tuple[str, str], list[float]] = {(t, w): [] for t in targets for w in requests}
    phases: dict[tuple[str, str], list[dict[str, float]]] = {(t, w): [] for t in targets for w in requests}
    with tempfile.TemporaryDirectory() as tmp, ExitStack() as stack:
        send = {name: stack.enter_context(start(name, profile, Path(tmp))) for name in targets}
        for workload, n in requests.items():
            for i in range(WARMUP):
                for name in targets:
                    send[name](fresh.item(workload, WARMUP_START + i))
            for i in tqdm(range(n), desc=workload, unit="request"):
                item = fresh.item(workload, i)
                for name in targets:  # the targets take turns, request by request
                    took, ms = send[name](item)
                    seconds[name, workload].append(took)
                    inside = ms.pop("total", sum(ms.values()))  # the gateway's own total, where it gives one
                    phases[name, workload].append({**ms, "beyond": took * 1000 - inside})
    print(f"\n(load average {os.getloadavg()[0]:.2f} at the end)")
    pairs = [(t, ref) for t in targets if (ref := reference(t, targets)) != t]
    print("| workload | " + " | ".join(f"{t} answers/s (p50 ms)" for t in targets) + " | "
          + " | ".join(f"{t} ÷ {ref}" for t, ref in pairs) + " |")
    print("|---" * (len(targets) + len(pairs) + 1) + "|")
    for workload in requests:
        per_q = len(fresh.item(workload, 0).question_ids)  # answers a request gives
        rate = {t: per_q * len(seconds[t, workload]) / sum(seconds[t, workload]) for t in targets}
        cells = [f"{rate[t]:.2f} ({statistics.median(seconds[t, workload]) * 1000:.0f})" for t in targets]
        ratios = [f"{rate[t] / rate[ref]:.2f}" for t, ref in pairs]
        print(f"| {workload} | " + " | ".join(cells + ratios) + " |")
    print_phases(targets, requests, phases)


def reference(target: str, targets: list[str]) -> str:
    """What `target` is measured against: llama-server where it ran (the target to beat; on this
    CPU's own kernels for a -native target when llama-server-native ran), else the floor (ours)."""
    if target.endswith("-native") and "llama-server-native" in targets:
        return "llama-server-native"
    return "llama-server" if "llama-server" in targets else "floor"


def print_phases(targets: list[str], requests: dict[str, int], phases: dict[tuple[str, str], list[dict[str, float]]]
                 ) -> None:
    """Per workload and target, the p50 ms of each phase, in the order a request goes through them."""
    print("\nWhere the time goes, p50 ms by phase (beyond = what the client saw besides them):")
    for workload in requests:
        for name in targets:
            rows = phases[name, workload]
            names = list(dict.fromkeys(key for row in rows for key in row))
            cells = [f"{key} {statistics.median(row.get(key, 0.0) for row in rows):.1f}" for key in names]
            print(f"- {workload}, {name}: " + ", ".join(cells))


if __name__ == "__main__":
    main()
