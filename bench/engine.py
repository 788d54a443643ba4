"""What batching, state snapshots and warmup are worth with llama.cpp on this machine.

    make bench-engine                  # or: python -m bench.engine [--quick] [--reps N]

Prints one table, every figure measured in this run. Parts that need a process of their own
(a first request after loading, memory, fast mode) run in a child process. Times are medians
of --reps repetitions, in milliseconds of wall time with the process's CPU time beside them;
the requests come from bench/workloads.json (copies of the project's W2/W3 decision workloads)
and, for the long requests of part 6, from loadtest/workloads.py.
Not run by the tests.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import psutil

from gateway import pipeline
from gateway.answers import sigmoid
from jevfleet.harness.engine import model_of, new_engine as harness_engine
from loadtest import workloads
from shared.config import load_settings
from shared.profiles import Profile
from worker.engine import Engine
from worker.job import Job
from worker.warmup import make_job, rendered_job, startup_warmup

WORKLOADS = json.loads((Path(__file__).with_name("workloads.json")).read_text())
Row = tuple[str, str, str]  # (part, what, figure)


def model() -> tuple[Profile, Path]:
    """The configured profile and GGUF (conf file and JEV_* environment)."""
    return model_of(load_settings())


def new_engine(*, ctx: int = 2048, pin: bool = True, **changes: Any) -> Engine:
    """An engine as a worker builds it from the configured settings with this benchmark's ctx and
    `changes` (mode, state_cache ...), threads as one worker of the default fleet."""
    return harness_engine(load_settings(), ctx=ctx, pin_preamble=pin, **changes)


@dataclass(frozen=True)
class Took:
    """Wall time, and the CPU time of the whole process (all llama.cpp threads): on a shared
    machine the second says what the work costs when the first is inflated by waiting."""

    wall: float
    cpu: float

    def __str__(self) -> str:
        return f"{self.wall:.0f} ms (cpu {self.cpu:.0f})"

    def __sub__(self, other: Took) -> Took:
        return Took(self.wall - other.wall, self.cpu - other.cpu)

    def times(self, other: Took) -> str:
        """How many times longer self takes than other."""
        return f"{self.wall / other.wall:.2f}x (cpu {self.cpu / other.cpu:.2f}x)"


def ms(fn: Callable[[], object]) -> Took:
    wall, cpu = time.perf_counter(), time.process_time()
    fn()
    return Took((time.perf_counter() - wall) * 1000, (time.process_time() - cpu) * 1000)


def median_ms(fn: Callable[[], object], reps: int, before: Callable[[], object] = lambda: None) -> Took:
    return alternating([(fn, before)], reps)[0]


def alternating(cases: list[tuple[Callable[[], object], Callable[[], object]]], reps: int) -> list[Took]:
    """Median time of each (fn, untimed before) case, the cases taking turns in every
    repetition, so that a machine whose load drifts treats all of them alike."""
    runs: list[list[Took]] = [[] for _ in cases]
    for _ in range(reps):
        for (fn, before), out in zip(cases, runs):
            before()
            out.append(ms(fn))
    return [Took(statistics.median(r.wall for r in out), statistics.median(r.cpu for r in out)) for out in runs]


NOTHING: Callable[[], object] = lambda: None


def sized_job(engine: Engine, profile: Profile, tokens: int, k: int) -> Job:
    """A request that reads exactly `tokens` new tokens when nothing is cached: BOS, the end of
    the k-th W2 state (so batch mates differ) and its question."""
    item = WORKLOADS["W2"][k % len(WORKLOADS["W2"])]
    job = make_job(engine, profile, item["state"], [item["question"]])
    room = tokens - len(job.suffixes[0])
    job.prefix = job.prefix[:1] + job.prefix[len(job.prefix) - room + 1:]
    return job


def with_prefix_length(job: Job, length: int, keep: int) -> Job:
    """The same request with its prefix cut to `length` tokens: the first `keep` (the preamble)
    and the end of the state."""
    job.prefix = job.prefix[:keep] + job.prefix[len(job.prefix) - (length - keep):]
    return job


# --- (1) batching ------------------------------------------------------------------------------
def part_batching(reps: int) -> list[Row]:
    profile, _ = model()
    engine = new_engine(state_cache=0, pin=False)  # every token is read: the batch is what is measured
    engine.run([sized_job(engine, profile, 64, 99)])  # load pages, shapes
    rows = []
    for count, size in ((4, 64), (3, 120), (8, 32)):
        batch = [sized_job(engine, profile, size, k) for k in range(count)]
        together, apart = alternating([(lambda: engine.run(batch), NOTHING),
                                       (lambda: [engine.run([job]) for job in batch], NOTHING)], reps)
        rows.append(("1 batching", f"{count}x{size} tokens: one call / separate calls",
                     f"{together} / {apart} = {apart.times(together)}"))
    engine.close()
    return rows


# --- (2) state snapshots -----------------------------------------------------------------------
def part_snapshots(reps: int) -> list[Row]:
    profile, _ = model()
    states = [item["state"] for item in WORKLOADS["W2"]]
    questions = WORKLOADS["W3"]["questions"][:4]
    plain = new_engine(state_cache=0, pin=False)
    cached = new_engine()
    job = lambda e, k, qs=questions: make_job(e, profile, states[k % len(states)], qs)
    plain.run([job(plain, 0)])  # pages and shapes, both engines
    cached.run([job(cached, 0)])
    sample = job(cached, 0)
    rows = [("2 snapshots", "the state: prefix / preamble / questions, tokens",
             f"{len(sample.prefix)} / {len(cached.cache.entries[0].tokens)} / "
             + "+".join(str(len(s)) for s in sample.suffixes))]
    k = iter(range(1, 1000))
    kept = lambda: cached.run([job(cached, 0)])  # state 0 kept (untimed)
    one_q = lambda e, q: make_job(e, profile, states[0], [q])
    none, cold, warm, moved, none4, warm4 = alternating([
        (lambda: plain.run([job(plain, next(k))]), NOTHING),
        (lambda: cached.run([job(cached, next(k))]), cached.cache.clear),
        (lambda: cached.run([job(cached, 0)]), kept),
        # a hit whose snapshot must first move back into position order (as after an eviction)
        (lambda: cached.run([job(cached, 0)]), lambda: (kept(), cached.cache.lost_placement())),
        (lambda: [plain.run([one_q(plain, q)]) for q in questions], NOTHING),
        (lambda: [cached.run([one_q(cached, q)]) for q in questions], kept),
    ], reps)
    rows += [("2 snapshots", "1 request x 4 questions: no cache", f"{none}"),
             ("2 snapshots", "  cold cache (preamble pinned): faster by", f"{cold} = {none.times(cold)}"),
             ("2 snapshots", "  warm cache (state kept): faster by", f"{warm} = {none.times(warm)}"),
             ("2 snapshots", "  warm, the snapshot relocated first", f"{moved}, {moved - warm} more"),
             ("2 snapshots", "4 requests x 1 question: no cache / warm", f"{none4} / {warm4} = {none4.times(warm4)}")]
    # what a move costs, in its two halves: saving a kept state's cells beyond the preamble (to
    # host memory, or before a relocation) and restoring them first-fit with the preamble shared
    moves, entry, blobs = cached.cache.moves, next(e for e in cached.cache.entries if not e.pinned), []
    saved, restored = alternating([(lambda: blobs.append(moves.save(entry.seq, entry.tokens)), NOTHING),
                                   (lambda: moves.load(entry.seq, blobs[-1], entry.tokens), NOTHING)], reps)
    beyond = len(entry.tokens) - len(cached.cache.entries[0].tokens)
    rows.append(("2 snapshots", f"save / restore a kept state ({beyond} tokens beyond the preamble)",
                 f"{saved} / {restored}, {len(blobs[-1]) / 2**20:.1f} MB saved"))
    s = cached.cache.stats()
    rows += [("2 snapshots", "counters after the runs",
              f"hits {s.hits} misses {s.misses} reused {s.reused_tokens} relocations {s.relocations}")]
    plain.close()
    cached.close()
    return rows


# --- (3) warmup (child processes: a first request right after loading) -------------------------
def part_first_request(warmup: str) -> list[Row]:
    """warmup: none | startup. (Idle-time warmup of the remaining decode shapes was measured here
    too and gained nothing: on the EPYC, first request after none / startup / full warmup 98, 104,
    88 ms in one round and 80, 80, 80 ms in another, load 1.3; it is gone, see worker/warmup.py.)"""
    profile, _ = model()
    t0 = time.perf_counter()
    engine = new_engine()
    loaded = (time.perf_counter() - t0) * 1000
    spent = Took(0, 0)
    if warmup == "startup":
        spent = ms(lambda: startup_warmup(engine, profile))
    keep = len(engine.cache.entries[0].tokens)
    jobs = [with_prefix_length(make_job(engine, profile, item["state"], [WORKLOADS["W3"]["questions"][0]]),
                               keep + 45, keep) for item in WORKLOADS["W2"][5:7]]
    first = ms(lambda: engine.run(jobs[:1]))
    again = ms(lambda: engine.run(jobs[1:]))  # same lengths, another state: its shapes have run
    return [("3 warmup", f"{warmup}: load / warmup / 1st request / 2nd of that length",
             f"{loaded:.0f} ms / {spent} / {first} / {again}")]


# --- (4) memory (child process) ----------------------------------------------------------------
def part_memory(cache: bool, fill: int) -> list[Row]:
    """RSS growth of one engine (weights are mmapped: the page cache is shared between workers)."""
    profile, _ = model()
    rss = lambda: psutil.Process().memory_info().rss / 2**20
    before = rss()
    if not cache:
        new_engine(state_cache=0, pin=False)
        return [("4 memory", "engine RSS without snapshots (ctx 2048)", f"{rss() - before:.0f} MB")]
    engine = new_engine()
    empty = rss()
    states = [item["state"] for item in WORKLOADS["W2"]] + WORKLOADS["W3"]["states"]
    questions = WORKLOADS["W3"]["questions"][:4]
    for k in range(fill * 2):  # each state twice: a worker keeps a state in cells on its second sight
        engine.run([make_job(engine, profile, states[k // 2 % len(states)], questions)])
    full = rss()
    s = engine.cache.stats()
    small = new_engine()  # the same engine holding one state: a short KV cache to attend over
    small.run([make_job(small, profile, states[0], questions)])
    warm_full, warm_empty = alternating([
        (lambda: engine.run([make_job(engine, profile, states[fill - 1], questions)]), NOTHING),
        (lambda: small.run([make_job(small, profile, states[0], questions)]), NOTHING)], 3)
    return [("4 memory", "engine RSS, 16 x 8192-token cache: empty / filled",
             f"{empty - before:.0f} / {full - before:.0f} MB (process {full:.0f} MB)"),
            ("4 memory", "filled with: kept / tokens / KV bytes",
             f"{s.kept} / {s.tokens} / {s.bytes / 2**20:.0f} MB"),
            ("4 memory", "warm 4-question request, cache nearly empty / filled",
             f"{warm_empty} / {warm_full}")]


# --- (5) deterministic vs fast (child process per mode) ----------------------------------------
def part_mode(mode: str, reps: int) -> list[Row]:
    profile, _ = model()
    engine = new_engine(mode=mode)
    long_job = lambda k: sized_job(engine, profile, 384, k)
    engine.run([long_job(50)])
    k = iter(range(1000))
    prefill = median_ms(lambda: engine.run([long_job(next(k))]), reps, before=engine.cache.clear)
    batch = median_ms(lambda: engine.run([sized_job(engine, profile, 32, next(k)) for _ in range(8)]), reps,
                      before=engine.cache.clear)
    item = WORKLOADS["W3"]
    warm_job = lambda: make_job(engine, profile, item["states"][0], item["questions"][:4])
    engine.run([warm_job()])
    warm = median_ms(lambda: engine.run([warm_job()]), reps)
    return [("5 modes", f"{mode}: 384-token read / 8x32 batch / warm 4 questions", f"{prefill} / {batch} / {warm}"),
            ("5 modes", f"{mode}: largest P(yes) change across paths", path_deviation(engine, profile))]


def part_rates(reps: int) -> list[Row]:
    """Issue 12's long-request target, both modes in this process taking turns (so drift falls
    on both alike): ms per token read by a 384-token read, by 128 yes/no questions on one W2
    state and by a 255-option choice (W4's), each from an empty cache; then each long request's
    deterministic rate as a share of fast mode's long read (the target is 0.9 or more)."""
    profile, _ = model()
    engines = {mode: new_engine(mode=mode) for mode in ("deterministic", "fast")}
    questions = list(dict.fromkeys(q for item in workloads.load("W1") for q in item.questions))[:128]
    choice = next(item for item in workloads.load("W4") if item.options)
    shapes = {"384-token read": lambda e: sized_job(e, profile, 384, 7),
              "128 questions": lambda e: make_job(e, profile, WORKLOADS["W2"][3]["state"], questions),
              f"{len(choice.options)} options": lambda e: body_job(e, profile, workloads.decision_body(choice))}
    per_token: dict[tuple[str, str], float] = {}
    for shape, build in shapes.items():
        cases, read = [], {}
        for mode, engine in engines.items():
            job: list[Job] = []

            def run(mode: str = mode, engine: Engine = engine, job: list[Job] = job) -> None:
                read[mode] = engine.run(job)

            def before(engine: Engine = engine, job: list[Job] = job) -> None:
                engine.cache.clear()
                job[:] = [build(engine)]
            cases.append((run, before))
        alternating(cases, 1)  # shapes and pages once, untimed
        for mode, took in zip(engines, alternating(cases, reps)):
            per_token[mode, shape] = took.wall / read[mode]
    for engine in engines.values():
        engine.close()
    rows = [("6 rates", f"{mode}: ms per token read, " + " / ".join(shapes),
             " / ".join(f"{per_token[mode, shape]:.2f}" for shape in shapes)) for mode in engines]
    long_read = per_token["fast", next(iter(shapes))]
    rows.append(("6 rates", "deterministic's rate / fast's 384-token read, " + " / ".join(shapes),
                 " / ".join(f"{long_read / per_token['deterministic', shape]:.2f}" for shape in shapes)))
    return rows


def body_job(engine: Engine, profile: Profile, body: dict) -> Job:
    """Any decision request body (a choice too) rendered as the gateway renders it."""
    rendered = pipeline.prepare(body, profile).rendered
    return rendered_job(engine, profile, rendered.prefix, rendered.suffixes)


def path_deviation(engine: Engine, profile: Profile) -> str:
    """The same questions answered from a fresh read (no snapshots at all), then cold, warm and
    inside batches on `engine`: the largest difference in P(yes) from the fresh read."""
    states, questions = WORKLOADS["W3"]["states"][1:3], WORKLOADS["W3"]["questions"][4:7]
    plain = new_engine(mode="deterministic" if engine.deterministic else "fast", state_cache=0, pin=False)
    fresh = {}
    for state in states:
        job = make_job(plain, profile, state, questions)
        plain.run([job])
        fresh.update({(state, q): m for q, m in zip(questions, job.margins)})
    plain.close()
    engine.cache.clear()
    worst = 0.0
    batches = [[(states[0], questions)], [(states[0], questions)], [(states[1], questions[:1])],
               [(states[1], questions[1:]), (states[0], questions[2:]), (states[1], questions[:1])]]
    for batch in batches:  # cold, warm, cold and batched, warm and batched
        jobs = [make_job(engine, profile, state, qs) for state, qs in batch]
        engine.run(jobs)
        for (state, qs), job in zip(batch, jobs):
            for q, m in zip(qs, job.margins):
                worst = max(worst, abs(sigmoid(m) - sigmoid(fresh[(state, q)])))
    return f"{worst:.2g}" if worst else "0 (bit-identical)"


PARTS: dict[str, Callable[[argparse.Namespace], list[Row]]] = {
    "batching": lambda a: part_batching(a.reps),
    "snapshots": lambda a: part_snapshots(a.reps),
    "first-none": lambda a: part_first_request("none"),
    "first-startup": lambda a: part_first_request("startup"),
    "memory-plain": lambda a: part_memory(False, 0),
    "memory-cache": lambda a: part_memory(True, 4 if a.quick else 16),
    "mode-deterministic": lambda a: part_mode("deterministic", a.reps),
    "mode-fast": lambda a: part_mode("fast", a.reps),
    "rates": lambda a: part_rates(a.reps),
}


def run_child(part: str, args: argparse.Namespace) -> list[Row]:
    cmd = [sys.executable, "-m", "bench.engine", "--part", part, "--reps", str(args.reps)]
    cmd += ["--quick"] if args.quick else []
    out = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        return [(part, "FAILED", out.stderr.strip().splitlines()[-1] if out.stderr.strip() else "?")]
    return [tuple(row) for row in json.loads(out.stdout.strip().splitlines()[-1])]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.engine", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions, a smaller cache fill")
    parser.add_argument("--reps", type=int, default=0, help="repetitions per figure (default 5, quick 1)")
    parser.add_argument("--part", choices=sorted(PARTS), help=argparse.SUPPRESS)  # one part, JSON out
    args = parser.parse_args(argv)
    args.reps = args.reps or (1 if args.quick else 5)
    if args.part:
        print(json.dumps(PARTS[args.part](args)))
        return 0
    rows: list[Row] = []
    for part in PARTS:
        started = time.perf_counter()
        rows += run_child(part, args)
        print(f"  {part}: {time.perf_counter() - started:.0f} s", file=sys.stderr)
    width = max(len(what) for _, what, _ in rows)
    print(f"# python -m bench.engine{' --quick' if args.quick else ''} --reps {args.reps}  "
          f"(cpus {len(os.sched_getaffinity(0))}, load {os.getloadavg()[0]:.1f})")
    last = ""
    for part, what, figure in rows:
        print(f"{part if part != last else '':12} {what:{width}}  {figure}")
        last = part
    return 0


if __name__ == "__main__":
    sys.exit(main())
