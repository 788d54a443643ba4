"""Why llama-server reads a fresh prompt faster than deterministic mode does: the attention kernel.

    make bench-fresh-read                 # or: python -m bench.fresh_read [--tokens 384] [--reps 6]

Deterministic mode reads in micro-batches of at most 60 rows (worker/pieces.py) because ggml's
CPU flash attention switches at 64 query rows from a per-row kernel to a tiled one whose sums
depend on where a row's cells fall in 64-cell tiles (docs/architecture.md). This measures what
that costs on the configured model (JEV_MODEL for a zoo file): the same first-seen tokens read
by
  - the engine as a worker builds it (the default settings: deterministic, its tiled reader since
    2026-12-06, worker/tiled_reader.py), on as many threads as the others (a default fleet of one
    worker a core would give it fewer);
  - bare llama.cpp contexts, one sequence, no eval callback, in pieces of 60 rows (per-row
    attention), 64 rows (tiled attention: the smallest piece that takes it) and 512 rows (the
    piece llama-server and fast mode use);
  - llama-server, as the sweep starts it (--no-server to skip), its own prompt_ms.
All take turns on each new token list, so a machine whose speed drifts slows all alike. Prints
the medians of --reps, each reader ÷ the 64-row context, and the load average. Not run by the tests.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import tempfile
import time
import urllib.request
from contextlib import ExitStack
from pathlib import Path
from typing import Callable

from bench.engine import new_engine
from loadtest import servers
from shared.config import load_settings
from shared.derive import serving_profile
from shared.llama import llama, load_model
from shared.model_files import resolve_model
from worker.pieces import token_rows

PIECES = (60, 64, 512)  # per-row attention below 64 query rows, tiled from 64 (ggml's GGML_FA_TILE_Q)
CTX = 4096  # cells of the bare contexts: within every zoo file's trained length
Reader = Callable[[list[int]], float]  # reads the tokens from position 0: the seconds it took


def bare_context(model, piece: int) -> Reader:
    """A llama.cpp context like llama-server's (one sequence, flash attention, no eval callback)
    that reads in pieces of `piece` rows, logits of the last row only."""
    lib = llama()
    params = lib.llama_context_default_params()
    params.n_ctx, params.n_batch, params.n_ubatch, params.n_seq_max = CTX, piece, piece, 1
    params.n_outputs_max = piece
    params.n_threads = params.n_threads_batch = servers.BASELINE_THREADS
    params.flash_attn_type = lib.LLAMA_FLASH_ATTN_TYPE_ENABLED
    params.no_perf = True
    ctx = lib.llama_init_from_model(model, params)
    batch = lib.llama_batch_init(piece, 0, 1)

    def read(tokens: list[int]) -> float:
        lib.llama_memory_clear(lib.llama_get_memory(ctx), True)
        start = time.perf_counter()
        for at in range(0, len(tokens), piece):
            part = tokens[at : at + piece]
            for i, token in enumerate(part):
                batch.token[i], batch.pos[i], batch.n_seq_id[i] = token, at + i, 1
                batch.seq_id[i][0], batch.logits[i] = 0, at + i == len(tokens) - 1
            batch.n_tokens = len(part)
            if lib.llama_decode(ctx, batch) != 0:
                raise RuntimeError("llama_decode failed")
        return time.perf_counter() - start
    return read


def engine_reader() -> Reader:
    """The engine as a worker builds it from the settings, reading into one working sequence, on
    llama-server's threads."""
    engine = new_engine(pin=False, threads=servers.BASELINE_THREADS)

    def read(tokens: list[int]) -> float:
        start = time.perf_counter()
        if engine.reader:  # deterministic mode: the tiled reader, then its cells into the engine's context
            engine.reader.read_into(engine, 0, 0, tokens)
        else:
            engine._read(token_rows((0,), 0, tokens), lambda *_: None)
        took = time.perf_counter() - start
        engine.remove(0)
        return took
    return read


def server_reader(url: str) -> Reader:
    """llama-server's own prompt time for the tokens, its prompt cache off."""
    def read(tokens: list[int]) -> float:
        body = json.dumps({"prompt": tokens, "n_predict": 1, "cache_prompt": False}).encode()
        request = urllib.request.Request(url + "/completion", body, {"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=600) as reply:
            return json.load(reply)["timings"]["prompt_ms"] / 1000
    return read


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, default=384, help="tokens a read (W3's states are 300-700)")
    parser.add_argument("--reps", type=int, default=6)
    parser.add_argument("--no-server", action="store_true", help="skip llama-server (no build on first use)")
    args = parser.parse_args()
    settings = load_settings()
    gguf = resolve_model(serving_profile(settings),
                         settings.cache_path, settings.model)
    print(f"{gguf.name}: {args.tokens} first-seen tokens a read, {args.reps} reads each; "
          f"load average {os.getloadavg()[0]:.2f} at the start", flush=True)
    lib, rng = llama(), random.Random(7)
    model = load_model(gguf)
    n_vocab = lib.llama_vocab_n_tokens(lib.llama_model_get_vocab(model))
    readers: dict[str, Reader] = {"engine (deterministic)": engine_reader()}
    readers |= {f"llama.cpp, {p}-row pieces": bare_context(model, p) for p in PIECES}
    with ExitStack() as stack:
        if not args.no_server:
            binary = servers.ensure_llama_server(settings.cache_path)
            logs = Path(stack.enter_context(tempfile.TemporaryDirectory()))
            url = stack.enter_context(servers.llama_server(binary, gguf, logs, threads=servers.BASELINE_THREADS,
                                                           ctx=servers.BASELINE_CTX, slots=servers.SLOTS))
            readers["llama-server"] = server_reader(url)
        took: dict[str, list[float]] = {name: [] for name in readers}
        for rep in range(args.reps + 1):  # the first round warms every reader up and is not counted
            tokens = [rng.randrange(n_vocab // 10, n_vocab // 2) for _ in range(args.tokens)]
            for name, read in readers.items():
                seconds = read(tokens)
                if rep:
                    took[name].append(seconds)
    base = statistics.median(took[f"llama.cpp, {PIECES[1]}-row pieces"])
    for name, seconds in took.items():
        median = statistics.median(seconds)
        print(f"{name:26s} {median:6.2f} s  ÷ 64-row {median / base:4.2f}   "
              f"({', '.join(f'{s:.2f}' for s in seconds)})")
    print(f"load average {os.getloadavg()[0]:.2f} at the end")


if __name__ == "__main__":
    main()
