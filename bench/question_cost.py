"""What a question on a kept state costs a row: the engine against bare llama.cpp contexts.

    make bench-question-cost              # or: python -m bench.question_cost [--reps 6]

W3's later questions read 7-14 tokens each on a state the server keeps. At 4 clients llama-server
answers four of them in ~950 ms on the zoo's Qwen 2.5 1.5B, the fleet's worker takes 656 ms for
batches of 2.4 and 1,132 ms for 3.7 (docs/benchmarks.md, `make bench-w3-phases`); both take
ggml's row-by-row attention kernel below 64 rows. This reads the same rows, --questions sequences
of --rows tokens each, every one on its own --state-token state already in cells, in one
llama_decode, through
  - the engine as a worker builds it (the default settings: one unified cache sized for the
    snapshots and every working sequence, the preamble pinned, its eval callback), the states in
    its working sequences, no answer rows;
  - a bare llama.cpp context (no eval callback) of one unified cache, only as large as the states
    and questions need, the last row of each question an output (as llama-server's);
  - the same with a cache stream a sequence (kv_unified false), as llama-server's slots.
The states are read once, untimed; after each timed read the question cells are removed. All
three take turns on the same rows; prints the medians of --reps, each ÷ the stream-a-sequence
context. Then whole requests: Engine.run (what a worker's batch costs, readout included) on
W3-fresh's later questions once their states are kept, in batches of 1, 2 and --questions taking
turns, per batch and per question: what a fleet's batches cost without the fleet around them.
Prints the load average. Not run by the tests.
"""
from __future__ import annotations

import argparse
import os
import random
import statistics
import time
from typing import Callable

from bench.engine import new_engine
from bench.w3_phases import PASS as W3_PASS  # W3-fresh's requests on one set of states
from loadtest import fresh, servers
from shared.config import load_settings
from shared.derive import serving_profile
from shared.llama import llama, load_model
from shared.model_files import resolve_model
from worker.pieces import token_rows
from worker.warmup import make_job

Reader = Callable[[list[list[int]]], float]  # reads one question a state: the seconds it took
READ_PIECE = 512  # untimed state reads of the bare contexts


def bare_context(model, cells: int, sequences: int, unified: bool, states: list[list[int]]) -> Reader:
    """A llama.cpp context without eval callback holding `states`, one a sequence; each read puts
    one question on every state in one call (the last row of each an output) and removes them."""
    lib = llama()
    params = lib.llama_context_default_params()
    params.n_ctx, params.n_batch, params.n_ubatch, params.n_seq_max = cells, READ_PIECE, READ_PIECE, sequences
    params.n_threads = params.n_threads_batch = servers.BASELINE_THREADS
    params.flash_attn_type = lib.LLAMA_FLASH_ATTN_TYPE_ENABLED
    params.kv_unified = unified
    params.swa_full = True
    params.no_perf = True
    ctx = lib.llama_init_from_model(model, params)
    memory = lib.llama_get_memory(ctx)
    batch = lib.llama_batch_init(READ_PIECE, 0, 1)

    def decode(rows: list[tuple[int, int, int, bool]]) -> None:  # (seq, position, token, output)
        for i, (seq, pos, token, output) in enumerate(rows):
            batch.token[i], batch.pos[i], batch.n_seq_id[i] = token, pos, 1
            batch.seq_id[i][0], batch.logits[i] = seq, output
        batch.n_tokens = len(rows)
        if lib.llama_decode(ctx, batch) != 0:
            raise RuntimeError("llama_decode failed")

    for seq, state in enumerate(states):
        for at in range(0, len(state), READ_PIECE):
            decode([(seq, at + i, t, False) for i, t in enumerate(state[at:at + READ_PIECE])])

    def read(questions: list[list[int]]) -> float:
        rows = [(seq, len(states[seq]) + i, t, i == len(q) - 1) for seq, q in enumerate(questions)
                for i, t in enumerate(q)]
        start = time.perf_counter()
        decode(rows)
        took = time.perf_counter() - start
        for seq in range(len(states)):
            lib.llama_memory_seq_rm(memory, seq, len(states[seq]), -1)
        return took
    return read


def engine_reader(engine, states: list[list[int]]) -> tuple[Reader, int]:
    """`states` in the engine's working sequences 1..n; (reader, the engine's cells)."""
    for seq, state in enumerate(states, start=1):
        engine._read(token_rows((seq,), 0, state), None)

    def read(questions: list[list[int]]) -> float:
        rows = [r for seq, q in enumerate(questions, start=1) for r in token_rows((seq,), len(states[seq - 1]), q)]
        start = time.perf_counter()
        engine._read(rows, None)
        took = time.perf_counter() - start
        for seq in range(1, len(states) + 1):
            engine.remove(seq, len(states[seq - 1]), -1)
        return took
    return read, llama().llama_n_ctx(engine.ctx_ptr)


def later_batches(engine, profile, sizes: tuple[int, ...], reps: int) -> dict[int, list[float]]:
    """size -> seconds of Engine.run on batches of that many W3-fresh later questions, the sizes
    taking turns, all in one pass over its five states, which are read first (twice: a snapshot
    is kept on its second miss)."""
    at = fresh.RUN_STRIDE - 2000  # the start of a pass no other benchmark's rounds reach
    if 2 * fresh.W3_STATES + (reps + 1) * sum(sizes) > W3_PASS:
        raise SystemExit(f"--reps {reps}: more later questions than one pass of W3 holds")

    def job(k: int):
        item = fresh.item("W3-fresh", at + k)
        return make_job(engine, profile, item.state, list(item.questions))
    for k in range(2 * fresh.W3_STATES):
        engine.run([job(k)])
    k, took = 2 * fresh.W3_STATES, {size: [] for size in sizes}
    for rep in range(reps + 1):  # the first round is not counted
        for size in sizes:
            jobs = [job(k + i) for i in range(size)]
            k += size
            start = time.perf_counter()
            engine.run(jobs)
            if rep:
                took[size].append(time.perf_counter() - start)
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--questions", type=int, default=4, help="sequences, one question each (W3's clients)")
    parser.add_argument("--rows", type=int, default=12, help="tokens a question (W3's later ones: 7-12)")
    parser.add_argument("--state", type=int, default=620, help="tokens a state (W3's, preamble included)")
    parser.add_argument("--reps", type=int, default=6)
    args = parser.parse_args()
    settings = load_settings()
    profile = serving_profile(settings)
    gguf = resolve_model(profile, settings.cache_path, settings.model)
    print(f"{gguf.name}: {args.questions} questions of {args.rows} tokens, each on its own {args.state}-token "
          f"state, {args.reps} reads each; load average {os.getloadavg()[0]:.2f} at the start", flush=True)
    lib, rng = llama(), random.Random(7)
    model = load_model(gguf)
    n_vocab = lib.llama_vocab_n_tokens(lib.llama_model_get_vocab(model))

    def tokens(n: int) -> list[int]:
        return [rng.randrange(n_vocab // 10, n_vocab // 2) for _ in range(n)]

    states = [tokens(args.state) for _ in range(args.questions)]
    engine = new_engine(ctx=settings.ctx, threads=servers.BASELINE_THREADS)
    reader, cells = engine_reader(engine, states)
    small = -(-(args.state + args.rows) * args.questions // 256) * 256
    readers: dict[str, Reader] = {
        f"engine ({cells} cells)": reader,
        f"llama.cpp, unified, {small} cells": bare_context(model, small, args.questions, True, states),
        f"llama.cpp, a stream a sequence, {small} cells": bare_context(model, small, args.questions, False, states)}
    took: dict[str, list[float]] = {name: [] for name in readers}
    for rep in range(args.reps + 1):  # the first round warms every reader up and is not counted
        questions = [tokens(args.rows) for _ in range(args.questions)]
        for name, read in readers.items():
            seconds = read(questions)
            if rep:
                took[name].append(seconds)
    rows = args.questions * args.rows
    base = statistics.median(took[list(readers)[-1]])
    for name, seconds in took.items():
        median = statistics.median(seconds)
        print(f"{name:46s} {median * 1000:7.0f} ms  {median * 1000 / rows:5.1f} ms a row  ÷ streams "
              f"{median / base:4.2f}   ({', '.join(f'{s * 1000:.0f}' for s in seconds)})")
    for seq in range(1, len(states) + 1):
        engine.remove(seq)
    for size, seconds in later_batches(engine, profile, (1, 2, args.questions), args.reps).items():
        median = statistics.median(seconds)
        print(f"Engine.run, {size} later W3 question(s) a batch {median * 1000:7.0f} ms  "
              f"{median * 1000 / size:5.0f} ms a question   ({', '.join(f'{s * 1000:.0f}' for s in seconds)})")
    print(f"load average {os.getloadavg()[0]:.2f} at the end")


if __name__ == "__main__":
    main()
