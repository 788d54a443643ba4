"""Where W3-fresh's time goes at several clients: the first question on each new state, the second,
and the later ones, request by request, for the fleet in both modes and for llama-server.

    make bench-w3-phases          # or: python -m bench.w3_phases [--users 4] [--requests 200] [--rounds 2]

W3-fresh asks 20 questions about each of 5 new long states, interleaved (loadtest/fresh.py), so a
pass of 100 requests has 5 that read a state never seen (its first question), 5 that come back to
a state that the server read once (the second: where a snapshot or a prompt cache is first used)
and 90 later ones. The sweep gives one answers/s for all of them; this splits it, which is what
says whether a gap is the fresh read or the questions on kept states.

`--users` threads, each on its own kept connection, take the next request of one shared sequence
(as the Locust users do), `--requests` of them (whole passes). The targets (the fleet at its
defaults, the fleet at --mode fast, llama-server as the sweep starts it, and `in-process`: the
fleet's request path and worker alone, jevfleet/local.py's gateway pipeline, Scheduler and Engine
in this process, with the clients as threads: no HTTP, no ZeroMQ, no other process) are each
started once and take turns round by round; in a round all get the same items, and every round's
are new. Per target and phase it prints the requests' mean and p50
milliseconds and the seconds they add up to, llama-server's tokens read (prompt_n) and reused
(cache_n), the fleet's mean queue and inference time and median inference time (its Server-Timing
header, or the in-process worker's Result) and requests a worker batch (its /metrics, as the
answers saw them: a batch of 3 counts three times), the in-process worker's batches of later
questions by size with what each cost, then answers/s over the rounds and each ÷ llama-server. A
reply that is not in form (validate.InvalidAnswer: with random weights llama-server's one token can
be a byte piece it gives no probabilities for) is counted as answered, since its work was done, and
said. Not run by the tests; quote it with the load average it prints.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import threading
import time
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Callable, Iterator, NamedTuple

from jevfleet.harness.net import KeptConnection, server_timing
from jevfleet.local import LocalDecider
from loadtest import fleet_metrics, fresh, servers, validate
from loadtest.protocols import PROTOCOLS, Protocol
from loadtest.workloads import load as load_workload
from shared.config import Settings, load_settings
from shared.derive import serving_profile
from shared.profiles import Profile

WORKLOAD = "W3-fresh"
PASS = len(load_workload("W3"))  # requests in one pass over W3_STATES new states
PHASES = {"first": range(0, fresh.W3_STATES), "second": range(fresh.W3_STATES, 2 * fresh.W3_STATES),
          "later": range(2 * fresh.W3_STATES, PASS)}  # by a request's place in its pass
TARGETS = ("jevfleet", "jevfleet-fast", "in-process", "llama-server")
WARMUP = 3  # one-client requests to each target before its first round, from a range no round reaches
WARMUP_START = fresh.RUN_STRIDE - 1000


class Client(NamedTuple):
    """One closed-loop client's way to a target: send(item) -> its row's figures; close()."""
    send: Callable[[object], dict]
    close: Callable[[], None]


def phase_of(k: int) -> str:
    return next(name for name, places in PHASES.items() if k % PASS in places)


@contextmanager
def start(name: str, profile: Profile, settings: Settings, logs: Path) -> Iterator[tuple[Callable[[], Client], str]]:
    """Target `name` started: (its client factory, its URL; "" in process)."""
    if name == "in-process":
        decider = LocalDecider(settings, profile)
        try:
            yield in_process_client(decider, profile), ""
        finally:
            decider.close()
        return
    server = servers.jevfleet(logs, name, flags=("--mode", "fast")) if name == "jevfleet-fast" else \
        servers.ours_or_llama_server(name, profile, logs / name)
    with server as url:
        yield http_client(name, url, profile), url


def figures(name: str, raw: bytes, headers: dict[str, str]) -> dict[str, float]:
    """What a reply says of its own work: llama-server's token counts, our phases' milliseconds."""
    if name == "llama-server":
        reply = json.loads(raw)
        timings = (reply[0] if isinstance(reply, list) else reply).get("timings", {})
        return {"prompt_n": timings.get("prompt_n", 0), "cache_n": timings.get("cache_n", 0)}
    phases = server_timing(headers)
    return {phase: phases[phase] for phase in ("queue", "inference") if phase in phases}


def not_in_form(protocol: Protocol, body: object, profile: Profile, item: object) -> int:
    """1 for a reply that was answered but is not in form (random weights: llama-server's one token
    may be a byte piece it gives no probabilities for), else 0; its work was done either way."""
    try:
        protocol.check(body, profile, item)
        return 0
    except validate.InvalidAnswer:
        return 1


def http_client(name: str, url: str, profile: Profile) -> Callable[[], Client]:
    """A factory of one client's request function for the HTTP target `name` at `url`: one kept
    connection each; a request returns its row's figures and whether its reply was in form."""
    protocol = PROTOCOLS["jevfleet" if name.startswith("jevfleet") else name]

    def client() -> Client:
        conn = KeptConnection(url, timeout=600)

        def send(item) -> dict:
            status, headers, raw = conn.post(protocol.path, json.dumps(protocol.body(profile, item)).encode())
            if status != 200:
                raise RuntimeError(f"{name}: HTTP {status} {raw[:200]!r}")
            return {"invalid": not_in_form(protocol, json.loads(raw), profile, item), **figures(name, raw, headers)}
        return Client(send, conn.close)
    return client


def in_process_client(decider: LocalDecider, profile: Profile) -> Callable[[], Client]:
    """The same requests, bodies and checks as the fleet's, answered by jevfleet/local.py's
    LocalDecider: the gateway's request path and a worker's scheduler and engine in this process."""
    protocol = PROTOCOLS["jevfleet"]

    def send(item) -> dict:
        answer = decider.answer_body(protocol.body(profile, item)).result()
        if answer.status != 200 or answer.result is None:
            raise RuntimeError(f"in-process: {answer.status} {str(answer.body)[:200]}")
        worker = answer.result
        return {"invalid": not_in_form(protocol, answer.body, profile, item), "queue": worker.queue_ms,
                "inference": worker.run_ms, "batch": worker.batch_requests}
    return lambda: Client(send, lambda: None)


def run(name: str, clients: Callable[[], Client], items: Callable[[int], object], requests: int,
        users: int) -> tuple[list[dict], float]:
    """`users` closed-loop clients over requests 0..requests-1 of `items`; (rows, wall seconds)."""
    lock, rows, failures = threading.Lock(), [], []
    counter: Iterator[int] = iter(range(requests))

    def user() -> None:
        client = clients()
        try:
            while True:
                with lock:
                    k = next(counter, None)
                if k is None:
                    return
                item = items(k)
                began = time.perf_counter()
                got = client.send(item)
                took = time.perf_counter() - began
                with lock:
                    rows.append({"k": k, "ms": took * 1000, **got})
        except Exception as exc:  # a client lost changes the load: the run is refused after the join
            failures.append(f"{name}: {exc!r}")
        finally:
            client.close()

    threads = [threading.Thread(target=user) for _ in range(users)]
    began = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if failures:
        raise SystemExit("\n".join(failures[:5]))
    return rows, time.perf_counter() - began


def report(name: str, rows: list[dict]) -> None:
    for phase in PHASES:
        mine = [r for r in rows if phase_of(r["k"]) == phase]
        ms = [r["ms"] for r in mine]
        extra = [f"{key} {statistics.mean(r.get(key, 0) for r in mine):.0f}"
                 for key in ("prompt_n", "cache_n", "queue", "inference") if any(key in r for r in mine)]
        if any("inference" in r for r in mine):  # a mean can hide a few batches that also read a new state
            extra.append(f"inference p50 {statistics.median(r.get('inference', 0) for r in mine):.0f}")
        print(f"| {name} | {phase} | {len(ms)} | {statistics.mean(ms):.0f} | {statistics.median(ms):.0f} | "
              f"{sum(ms) / 1000:.1f} | {', '.join(extra)} |")


def later_batches(rows: list[dict]) -> dict[int, list[float]]:
    """Requests a batch -> each such batch's milliseconds, over the batches that held later
    questions only, from rows that say their batch (the in-process target's): a fleet's
    /metrics has the sizes the answers saw, not what each batch cost."""
    if not rows or "batch" not in rows[0]:
        return {}
    held: dict[tuple[float, int], list[str]] = {}  # a batch's rows share its time and size
    for r in rows:
        held.setdefault((r["inference"], r["batch"]), []).append(phase_of(r["k"]))
    sizes: dict[int, list[float]] = {}
    for (ms, n), phases in held.items():
        if len(phases) == n and set(phases) == {"later"}:
            sizes.setdefault(n, []).append(ms)
    return dict(sorted(sizes.items()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--users", type=int, default=4)
    parser.add_argument("--requests", type=int, default=2 * PASS, help=f"per round and target (whole passes of {PASS})")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--targets", default=",".join(TARGETS), help=f"a subset of {','.join(TARGETS)}")
    args = parser.parse_args()
    targets = [t for t in args.targets.split(",") if t]
    if unknown := set(targets) - set(TARGETS):
        parser.error(f"--targets: {', '.join(sorted(unknown))} is not one of {', '.join(TARGETS)}")
    settings = load_settings()
    profile = serving_profile(settings)
    print(f"# python -m bench.w3_phases --users {args.users} --requests {args.requests} --rounds {args.rounds}"
          f"  (load average {os.getloadavg()[0]:.2f})", flush=True)
    rows: dict[str, list[dict]] = {t: [] for t in targets}
    wall: dict[str, float] = dict.fromkeys(targets, 0.0)
    grown: dict[str, dict] = {t: {} for t in targets}  # the fleets' /metrics series, grown over the rounds
    with tempfile.TemporaryDirectory() as tmp, ExitStack() as stack:
        started = {t: stack.enter_context(start(t, profile, settings, Path(tmp))) for t in targets}
        for t in targets:
            run(t, started[t][0], lambda k: fresh.item(WORKLOAD, WARMUP_START + k), WARMUP, 1)
        for r in range(args.rounds):
            base = r * fresh.RUN_STRIDE
            for t in targets:
                clients, url = started[t]
                before = fleet_metrics.scrape(url) if t.startswith("jevfleet") else {}
                got, seconds = run(t, clients, lambda k: fresh.item(WORKLOAD, base + k), args.requests,
                                   args.users)
                if before:
                    for key, value in fleet_metrics.growth(before, fleet_metrics.scrape(url)).items():
                        grown[t][key] = grown[t].get(key, 0.0) + value
                rows[t] += got
                wall[t] += seconds
                print(f"round {r + 1}: {t} {len(got) / seconds:.2f} answers/s "
                      f"(load average {os.getloadavg()[0]:.2f})", flush=True)
    print(f"\n(load average {os.getloadavg()[0]:.2f} at the end)\n")
    print("| target | phase | requests | mean ms | p50 ms | seconds | per request |")
    print("|---|---|---:|---:|---:|---:|---|")
    for t in targets:
        report(t, rows[t])
    rate = {t: len(rows[t]) / wall[t] for t in targets}
    invalid = {t: sum(r["invalid"] for r in rows[t]) for t in targets}
    batches = {t: b.batch for t in targets if (b := fleet_metrics.breakdown(grown[t]))}
    batches |= {t: statistics.mean(r["batch"] for r in rows[t]) for t in targets if rows[t] and "batch" in rows[t][0]}
    print("\nrequests a worker batch: " + ", ".join(f"{t} {n:.2f}" for t, n in batches.items()))
    for t in targets:
        if sizes := later_batches(rows[t]):
            print(f"{t}'s batches of later questions only: " + ", ".join(
                f"{n} a batch {len(took)} times, p50 {statistics.median(took):.0f} ms" for n, took in sizes.items()))
    print("not in form: " + ", ".join(f"{t} {invalid[t]} of {len(rows[t])}" for t in targets))
    print(", ".join(f"{t} {rate[t]:.2f} answers/s" + (f" ({rate[t] / rate['llama-server']:.2f}× llama-server)"
                                                          if "llama-server" in rate and t != "llama-server" else "")
                           for t in targets))


if __name__ == "__main__":
    main()
