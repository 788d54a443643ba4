"""Where a short request's time goes inside the worker: llama_decode calls, cache size.

    make bench-decode                     # or: python -m bench.decode_cost [--reps N]

Written to explain why llama-server answers W1 faster than our fleet (docs/benchmarks.md).
Per mode (each in a child process of its own) it prints
  - reading n tokens in one llama_decode call at position 0, and 48 tokens in three calls of
    16 (what a W1 request costs us: state in pieces, then the question in its own sequence);
  - Engine.run on W1 requests with the preamble pinned, as a worker runs them, and the share
    of that spent inside llama_decode, for two context sizes and two snapshot cache sizes;
  - the same requests decoded on the thread that loaded the engine vs on another thread (the
    cost that worker/model_thread.py removes from the fleet);
  - the same W1 requests sent one at a time by one light client to a real fleet (1 worker,
    both cores), with the worker's own inference time from Server-Timing: the engine inside
    the fleet, without Locust on the cores;
  - W1, W3 and 20-question W4 requests with llama.cpp let finish its 262k-column output matmul
    (as before worker/hidden.py) and stopped at the hidden state, taking turns request by request;
  - a 48-token read while another sequence holds 6,000 or 20,000 cells below it, against an
    empty cache (two engines, taking turns): what a wide KV range costs each read;
  - a 60-row read with nothing before it, after a 540-token state in its sequence, and as six
    10-row questions on one shared 540-token state (taking turns): what attending to a state
    costs each row, and what spreading the rows over sequences costs;
  - the fleet's overhead again, the fleet (one client, one kept connection) and an engine in
    this process taking turns with the same W1 requests, so that the machine's drift falls on
    both alike, and where the difference goes (HTTP, gateway phases, link, worker).
Medians of --reps, milliseconds of wall time. Not run by the tests.
"""
from __future__ import annotations

import argparse
import itertools
import json
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable

from bench.engine import alternating, median_ms, model, new_engine
from bench.request_shapes import one_at_a_time
from jevfleet.harness.net import KeptConnection
from jevfleet.harness.fleet import start_fleet
from loadtest import workloads
from shared.config import Settings
from worker.job import Job
from worker.memory import model_shape, snapshot_tokens
from worker.pieces import token_rows
from worker.warmup import make_job

SHAPES = ((2,), (16,), (48,), (16, 16, 16))
DEFAULTS = Settings()
# (ctx, snapshot tokens) of a default worker: the snapshot budget in the default model's tokens
DEFAULT_CACHE = (DEFAULTS.ctx, snapshot_tokens(DEFAULTS, model_shape(model()[1])))
WIDTHS = (6000, 20000)  # cells of another sequence below a read (kv_width)
STATE_TOKENS, QUESTIONS = 540, 6  # context_cost: a W2-sized state, and questions of 10 rows on it
CACHES = ((2048, 600), (2048, DEFAULT_CACHE[1]), (8192, 600), DEFAULT_CACHE)
DEFAULT_NAME = "ctx {}, snapshots {}".format(*DEFAULT_CACHE)


WARM_RUNS = 2  # runs before the timed ones (first decodes of a shape, page faults)


def calls(mode: str, reps: int) -> dict[str, float]:
    engine = new_engine(mode=mode, pin=False)
    tokens = engine.tokenize("The parcel came late and the box was crushed; the customer wants a refund. " * 4)

    def read(shape: tuple[int, ...]) -> None:
        at = 0
        for n in shape:
            engine._read(token_rows((0,), at, tokens[at:at + n]), None)
            at += n
        engine.remove(0)

    out = {}
    for shape in SHAPES:
        for _ in range(WARM_RUNS):
            read(shape)
        out["+".join(map(str, shape))] = median_ms(lambda s=shape: read(s), reps).wall
    engine.close()
    return out


def requests(mode: str, reps: int) -> dict[str, list[float]]:
    profile, items = model()[0], workloads.load("W1")
    out = {}
    for ctx, snapshot_tokens in CACHES:
        engine = new_engine(mode=mode, ctx=ctx, state_cache_tokens=snapshot_tokens)
        inner, decode_ms = engine._read, [0.0]

        def timed(items, on_output):
            start = time.perf_counter()
            n = inner(items, on_output)
            decode_ms[0] += (time.perf_counter() - start) * 1000
            return n

        engine._read = timed
        runs = []
        for item in items[: reps + WARM_RUNS]:
            job = make_job(engine, profile, item.state, [item.questions[0]])
            decode_ms[0] = 0.0
            start = time.perf_counter()
            read = engine.run([job])
            runs.append(((time.perf_counter() - start) * 1000, decode_ms[0], read))
        runs = runs[WARM_RUNS:]
        out[f"ctx {ctx}, snapshots {snapshot_tokens}"] = [statistics.median(r[i] for r in runs) for i in range(3)]
        engine.close()
    return out


def other_thread(mode: str, reps: int) -> tuple[float, float]:
    """(load thread, another thread) medians of W1 requests, at the default ctx and cache."""
    profile, items = model()[0], workloads.load("W1")[: reps + WARM_RUNS]
    engine = new_engine(mode=mode)

    def median_run() -> float:
        engine.cache.clear()  # both passes from the same cache state: none of these states kept
        runs = []
        for item in items:
            job = make_job(engine, profile, item.state, [item.questions[0]])
            start = time.perf_counter()
            engine.run([job])
            runs.append((time.perf_counter() - start) * 1000)
        return statistics.median(runs[WARM_RUNS:])

    here = median_run()
    elsewhere: list[float] = []
    thread = threading.Thread(target=lambda: elsewhere.append(median_run()))
    thread.start()
    thread.join()
    engine.close()
    return here, elsewhere[0]


FLEETS = {"fleet, defaults": (), "fleet, --warmup 0": ("--warmup", "0")}


def in_fleet(mode: str, reps: int, flags: tuple[str, ...]) -> tuple[float, float]:
    """(wall, inference) medians of W1 requests sent one at a time to a fresh fleet."""
    items = workloads.load("W1")[: reps + WARM_RUNS]
    with tempfile.TemporaryDirectory() as tmp:
        fleet = start_fleet(Path(tmp), workers=1, extra=["--mode", mode, *flags])
        try:
            rows = one_at_a_time(fleet.url, list(items))[WARM_RUNS:]
        finally:
            fleet.stop()
    return statistics.median(r["wall"] for r in rows), statistics.median(r["inference"] for r in rows)


TURNS = 40  # W1 requests each way for the overhead: a difference of a few ms needs more than --reps


def fleet_and_engine(mode: str, reps: int) -> dict[str, float]:
    """The fleet's overhead (issue 12's first item): each W1 request sent to a 1-worker fleet by
    one client on a kept connection, then run by an engine in this process, request by request,
    so that the machine's drift falls on both alike. Both at the defaults; the engine's requests
    are tokenized untimed. Medians: the fleet's wall, the engine's, the difference of each pair,
    and where the difference goes (from Server-Timing): HTTP and the client (wall - total), the
    gateway's own phases (total - queue - inference - outside), the link both ways and the
    worker's queue (outside + queue), and the worker's inference - the engine alone."""
    profile, items = model()[0], workloads.load("W1")
    engine = new_engine(mode=mode)
    pairs = []
    with tempfile.TemporaryDirectory() as tmp:
        fleet = start_fleet(Path(tmp), workers=1, extra=["--mode", mode])
        client = KeptConnection(fleet.url)
        try:
            for n, item in enumerate(items[:max(reps, TURNS) + WARM_RUNS]):
                timed = one_at_a_time(fleet.url, [item], client)[0]
                job = [make_job(engine, profile, item.state, [item.questions[0]])]
                start = time.perf_counter()
                engine.run(job)
                if n >= WARM_RUNS:
                    pairs.append(dict(timed, alone=(time.perf_counter() - start) * 1000))
        finally:
            client.close()
            fleet.stop()
    engine.close()
    parts = {"fleet": lambda p: p["wall"], "alone": lambda p: p["alone"],
             "difference": lambda p: p["wall"] - p["alone"], "http": lambda p: p["wall"] - p["total"],
             "gateway": lambda p: p["total"] - p["queue"] - p["inference"] - p["outside"],
             "link": lambda p: p["outside"] + p["queue"], "worker": lambda p: p["inference"] - p["alone"]}
    return {name: statistics.median(map(part, pairs)) for name, part in parts.items()}


def output_matmul(mode: str, reps: int) -> dict[str, tuple[float, float]]:
    """workload -> (output matmul finished, stopped at h) medians, the two taking turns; each
    run gets its own request (W1, W4: a state neither has read; W3: one of five kept states)."""
    profile, engine = model()[0], new_engine(mode=mode)
    w4 = [i for i in workloads.load("W4") if not i.options]
    out = {}
    for name, items, n in (("W1", workloads.load("W1"), reps), ("W3", workloads.load("W3"), reps),
                           ("W4, 20 questions", w4, max(2, reps // 4))):
        jobs = [make_job(engine, profile, i.state, list(i.questions)) for i in items]

        def case(full: bool) -> tuple[Callable[[], object], Callable[[], object]]:
            turn = itertools.count(int(full), 2)
            job: list[Job] = []

            def before() -> None:
                engine.tap.full_logits = full
                job[:] = [jobs[next(turn) % len(jobs)]]
            return lambda: engine.run(job), before

        alternating([case(True), case(False)], WARM_RUNS)
        finished, stopped = alternating([case(True), case(False)], n)
        out[name] = (finished.wall, stopped.wall)
    engine.close()
    return out


def kv_width(mode: str, reps: int) -> dict[str, tuple[float, float]]:
    """cells -> (empty cache, that many cells of another sequence below) medians of a 48-token
    read, for each of WIDTHS (the other sequence grows from one to the next)."""
    cells = max(WIDTHS) + 1024  # snapshot cells enough to hold the widest filler, on both engines
    narrow, wide = (new_engine(mode=mode, pin=False, state_cache_tokens=cells) for _ in range(2))
    filler = wide.tokenize("Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod. " * 2400)
    tokens = wide.tokenize("The parcel came late and the box was crushed; the customer wants a refund. " * 4)[:48]
    rows = token_rows((0,), 0, tokens)
    rows[-1] = (*rows[-1][:3], ("answer",))
    cases = [(lambda e=e: e._read(rows, lambda _key, _hidden, _full: None), lambda e=e: e.remove(0)) for e in (narrow, wide)]
    out, held = {}, 0
    for cells in WIDTHS:
        for at in range(held, cells, 60):  # up to exactly `cells`: the next width goes on from there
            wide._read(token_rows((5,), at, filler[at:min(at + 60, cells)]), None)
        held = cells
        alternating(cases, WARM_RUNS)
        empty, under = alternating(cases, reps)
        out[str(cells)] = (empty.wall, under.wall)
    narrow.close()
    wide.close()
    return out


def context_cost(mode: str, reps: int) -> dict[str, float]:
    """case -> median ms of the same 60 rows read with no context, after a state in their own
    sequence, and as QUESTIONS sequences of 60 / QUESTIONS rows sharing that state."""
    engine = new_engine(mode=mode, pin=False)
    tokens = engine.tokenize("Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod. " * 60)
    state, rows = tokens[:STATE_TOKENS], tokens[STATE_TOKENS:STATE_TOKENS + 60]
    seqs, per = tuple(range(1, QUESTIONS + 1)), 60 // QUESTIONS

    def fresh(state_seqs: tuple[int, ...]) -> Callable[[], object]:
        def before() -> None:
            for seq in (0, *seqs):
                engine.remove(seq)
            if state_seqs:
                engine._read(token_rows(state_seqs, 0, state), None)
        return before

    at = len(state)
    cases = {"no context": (lambda: engine._read(token_rows((0,), 0, rows), None), fresh(())),
             f"after a {at}-token state": (lambda: engine._read(token_rows((0,), at, rows), None), fresh((0,))),
             f"{QUESTIONS} x {per} rows on that state": (
                 lambda: engine._read([r for k, seq in enumerate(seqs)
                                       for r in token_rows((seq,), at, rows[k * per:(k + 1) * per])], None),
                 fresh(seqs))}
    alternating(list(cases.values()), WARM_RUNS)
    out = {name: took.wall for name, took in zip(cases, alternating(list(cases.values()), reps))}
    engine.close()
    return out


def child(mode: str, reps: int) -> None:
    print(json.dumps({"calls": calls(mode, reps), "requests": requests(mode, reps),
                      "threads": other_thread(mode, reps), "outputs": output_matmul(mode, reps),
                      "width": kv_width(mode, reps), "context": context_cost(mode, reps),
                      "turns": fleet_and_engine(mode, reps)}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--child", choices=["deterministic", "fast"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args.child, args.reps)
    results = {}
    for mode in ("deterministic", "fast"):
        print(f"measuring {mode} mode…", file=sys.stderr, flush=True)
        out = subprocess.run([sys.executable, "-m", "bench.decode_cost", "--child", mode, "--reps", str(args.reps)],
                             capture_output=True, text=True, check=True).stdout
        results[mode] = json.loads(out.strip().splitlines()[-1])
        results[mode]["fleets"] = {name: in_fleet(mode, args.reps, flags) for name, flags in FLEETS.items()}
    modes = list(results)
    print(f"\nllama_decode calls at position 0 (ms, median of {args.reps})")
    print(f"{'tokens per call':<22}" + "".join(f"{m:>16}" for m in modes))
    for shape in results[modes[0]]["calls"]:
        print(f"{shape:<22}" + "".join(f"{results[m]['calls'][shape]:>16.1f}" for m in modes))
    print(f"\nW1 requests through Engine.run, preamble pinned (ms, median of {args.reps})")
    print(f"{'cache':<30}" + "".join(f"{m + ' run / decode / tokens':>36}" for m in modes))
    for cache in results[modes[0]]["requests"]:
        cells = []
        for m in modes:
            run, decode, read = results[m]["requests"][cache]
            cells.append(f"{run:.1f} / {decode:.1f} / {read:.0f}")
        print(f"{cache:<30}" + "".join(f"{c:>36}" for c in cells))
    print(f"\nthe same W1 requests, engine loaded on one thread ({DEFAULT_NAME}; ms, median of {args.reps})")
    print(f"{'':<30}" + "".join(f"{m + ' load thread / other':>36}" for m in modes))
    print(f"{'decoded on':<30}" + "".join(f"{results[m]['threads'][0]:>26.1f} / {results[m]['threads'][1]:.1f}"
                                         for m in modes))
    print(f"\nthe same W1 requests to a 1-worker fleet, one light client (ms, median of {args.reps})")
    print(f"{'':<30}" + "".join(f"{m + ' wall / inference':>36}" for m in modes))
    for name in FLEETS:
        print(f"{name:<30}" + "".join(f"{results[m]['fleets'][name][0]:>26.1f} / {results[m]['fleets'][name][1]:.1f}"
                                      for m in modes))
    print("\nwhole requests through Engine.run: llama.cpp's output matmul finished / stopped at h (ms, medians)")
    print(f"{'':<30}" + "".join(f"{m + ' finished / stopped':>36}" for m in modes))
    for name in results[modes[0]]["outputs"]:
        print(f"{name:<30}" + "".join("{:>26.1f} / {:.1f} ({:.2f}x)".format(*results[m]["outputs"][name],
                                      results[m]["outputs"][name][0] / results[m]["outputs"][name][1]) for m in modes))
    print(f"\na 48-token read, empty cache / N cells of another sequence below (ms, median of {args.reps})")
    print(f"{'':<30}" + "".join(f"{m + ' empty / wide':>36}" for m in modes))
    for cells in results[modes[0]]["width"]:
        print(f"{cells + ' cells':<30}" + "".join("{:>26.1f} / {:.1f} ({:.2f}x)".format(
            *results[m]["width"][cells], results[m]["width"][cells][1] / results[m]["width"][cells][0]) for m in modes))
    print(f"\nthe same 60 rows read after nothing, after a state, as questions on a shared state (ms, median of {args.reps})")
    print(f"{'':<30}" + "".join(f"{m:>16}" for m in modes))
    for case in results[modes[0]]["context"]:
        print(f"{case:<30}" + "".join(f"{results[m]['context'][case]:>16.1f}" for m in modes))
    turns = max(args.reps, TURNS)
    print(f"\nfleet overhead, the fleet and the engine alone taking turns request by request (ms, medians of {turns};"
          "\nfleet - alone: the median of the pairs' differences; then where it goes, medians of each part)")
    print(f"{'':<16}{'fleet':>8}{'alone':>8}{'fleet - alone':>15}{'http':>8}{'gateway':>9}{'link':>7}{'worker':>8}")
    for m in modes:
        t = results[m]["turns"]
        print(f"{m:<16}{t['fleet']:>8.1f}{t['alone']:>8.1f}{t['difference']:>+15.1f}{t['http']:>8.1f}"
              f"{t['gateway']:>9.1f}{t['link']:>7.1f}{t['worker']:>+8.1f}")


if __name__ == "__main__":
    main()
