"""Can deterministic mode read a state through flash attention's tiled kernel? A check and a timing.

    make bench-tiled-read        # or: python -m bench.tiled_read [--tokens 384] [--reps 3]

Deterministic mode reads in micro-batches of at most 60 rows because from 64 query rows ggml's
CPU flash attention takes a tiled kernel whose sums follow 64-cell tile edges counted from the
start of the cache view, so a row's bits depend on where its cells sit (docs/architecture.md).
With a KV stream per sequence (`kv_unified` false, as llama-server runs its slots) a sequence's
cell for position p is cell p of its own stream, so the tile edges fall at fixed positions. This
bench builds bare llama.cpp contexts on the configured model (JEV_MODEL for a zoo file) and:

1. checks a question's logits row bit for bit when its state is read tiled (pieces of 64 rows a
   stream, the last one padded with throwaway rows after the state, removed afterwards) alone,
   beside other streams' states, in another stream, cut at another place, beside a longer state,
   and moved through a sequence blob into a unified context with other sequences' cells before
   it (where the per-row kernel reads the question: only the cells' order counts there). Three
   controls must differ, to show the check can fail: the state read in 60-row pieces (per-row
   kernel), its last piece unpadded, and a tiled read in a unified context behind 5 cells of
   another sequence;
2. times four first-seen states read one after another in 60-row pieces (what the engine does)
   against the same four read one after another in 64-row pieces, and side by side, 64 rows a
   stream a call, with and without moving each into a unified context as a blob.
Not run by the tests: a finding to build on, not a guard.
"""
from __future__ import annotations

import argparse
import ctypes
import os
import random
import statistics
import time

import numpy as np

from shared.config import load_settings
from shared.derive import serving_profile
from shared.llama import llama, load_model, restore_sequence, save_sequence
from shared.model_files import resolve_model

TILE = 64  # ggml's GGML_FA_TILE_Q and GGML_FA_TILE_KV
PER_ROW = 60  # deterministic mode's piece (worker/engine.UBATCH)
CELLS = 1024  # cells a stream
STREAMS = 4
QUESTION = 12  # question rows: per-row kernel (< 64 a stream)
OUTPUTS = 8  # output rows in every question call, so the last layer's kernels never change
THREADS = 2


class Context:
    """A bare llama.cpp context: `streams` KV streams (one a sequence) or one unified cache."""

    def __init__(self, model, *, streams: int, unified: bool) -> None:
        lib = self.lib = llama()
        params = lib.llama_context_default_params()
        params.n_ctx, params.n_seq_max, params.kv_unified = CELLS * streams, streams, unified
        params.n_batch = params.n_ubatch = TILE * streams
        params.n_outputs_max = TILE * streams
        params.n_threads = params.n_threads_batch = THREADS
        params.flash_attn_type = lib.LLAMA_FLASH_ATTN_TYPE_ENABLED
        params.swa_full, params.no_perf = True, True
        self.ctx = lib.llama_init_from_model(model, params)
        self.mem = lib.llama_get_memory(self.ctx)
        self.batch = lib.llama_batch_init(TILE * streams, 0, 1)
        self.n_vocab = lib.llama_vocab_n_tokens(lib.llama_model_get_vocab(model))

    def clear(self) -> None:
        self.lib.llama_memory_clear(self.mem, True)

    def decode(self, rows: list[tuple[int, int, int, bool]]) -> dict[int, np.ndarray]:
        """(token, position, sequence, output) rows in one call; the output rows' logits by index."""
        b = self.batch
        for i, (token, pos, seq, out) in enumerate(rows):
            b.token[i], b.pos[i], b.n_seq_id[i], b.logits[i] = token, pos, 1, out
            b.seq_id[i][0] = seq
        b.n_tokens = len(rows)
        if self.lib.llama_decode(self.ctx, b) != 0:
            raise RuntimeError("llama_decode failed")
        return {i: np.ctypeslib.as_array(self.lib.llama_get_logits_ith(self.ctx, i), shape=(self.n_vocab,)).copy()
                for i, row in enumerate(rows) if row[3]}

    def read(self, states: dict[int, tuple[int, list[int]]], piece: int, *, pad: bool = True) -> None:
        """Each sequence's tokens from its start position, `piece` rows a sequence a call, the
        sequences side by side; a short last piece filled with throwaway rows after the state
        (removed afterwards) unless pad is False."""
        longest = max(len(tokens) for _, tokens in states.values())
        for at in range(0, longest, piece):
            rows = []
            for seq in sorted(states):
                start, tokens = states[seq]
                part = tokens[at : at + piece]
                if not part:
                    continue
                filler = piece - len(part) if pad else 0
                rows += [(t, start + at + i, seq, False) for i, t in enumerate(part + [part[-1]] * filler)]
            self.decode(rows)
        for seq, (start, tokens) in states.items():
            self.lib.llama_memory_seq_rm(self.mem, seq, start + len(tokens), -1)

    def ask(self, questions: dict[int, tuple[int, list[int]]]) -> dict[int, np.ndarray]:
        """Every sequence's question in one call; the logits of each question's last row. OUTPUTS
        rows are flagged in all (the last rows of each question)."""
        rows, last = [], {}
        per = OUTPUTS // len(questions)
        for seq in sorted(questions):
            start, tokens = questions[seq]
            rows += [(t, start + i, seq, i >= len(tokens) - per) for i, t in enumerate(tokens)]
            last[seq] = len(rows) - 1
        logits = self.decode(rows)
        for seq, (start, _) in questions.items():
            self.lib.llama_memory_seq_rm(self.mem, seq, start, -1)
        return {seq: logits[i] for seq, i in last.items()}

    def save_unified(self, seq: int) -> ctypes.Array:
        """The sequence's blob as a unified (one-stream) cache reads it (one_stream)."""
        blob = one_stream(bytes(save_sequence(self.ctx, seq)))
        return (ctypes.c_uint8 * len(blob)).from_buffer_copy(blob)

    def load(self, seq: int, blob: ctypes.Array) -> None:
        restore_sequence(self.ctx, seq, blob)


def one_stream(blob: bytes) -> bytes:
    """A sequence blob of a cache with a stream a sequence, rewritten for a unified cache. llama.cpp
    0.3.36 writes a magic number and the sequence id, then each cache (two for sliding-window
    models) as its stream count, then each
    stream's cell count and, if not 0, its cells: per cell the position, the sequence count and
    ids; then the V layout flag, the layer count, each layer's K type, row size and rows, and the
    same for V (llama-kv-cache.cpp, state_write). A sequence's cells are in its own stream only,
    so the rewrite is the count 1 and that stream's part. Written for this bench, not the engine."""
    u32 = lambda at: int.from_bytes(blob[at : at + 4], "little")  # noqa: E731
    u64 = lambda at: int.from_bytes(blob[at : at + 8], "little")  # noqa: E731
    out, at = [blob[:8]], 8
    while at < len(blob):
        n_stream, at, kept = u32(at), at + 4, []
        for _ in range(n_stream):
            cells, begin = u32(at), at
            at += 4
            if not cells:
                continue
            for _ in range(cells):
                at += 8 + 4 * u32(at + 4)
            v_trans, n_layer = u32(at), u32(at + 4)
            at += 8
            for _ in range(n_layer):  # K rows
                at += 12 + cells * u64(at + 4)
            for _ in range(n_layer):  # V rows, or V transposed: element size, width, then columns
                at += 12 + cells * u64(at + 4) if not v_trans else 12 + cells * u32(at + 4) * u32(at + 8)
            kept.append(blob[begin:at])
        assert len(kept) <= 1, "a sequence in more than one stream"
        out += [(1).to_bytes(4, "little"), *(kept or [(0).to_bytes(4, "little")])]
    return b"".join(out)


def checks(model, rng: random.Random, n_vocab: int, n: int) -> list[tuple[str, bool, bool]]:
    """(what, expected to agree, agreed) for each way of reading state 0 and asking question 0."""
    tokens = lambda k: [rng.randrange(n_vocab // 10, n_vocab // 2) for _ in range(k)]  # noqa: E731
    states, question, longer = [tokens(n) for _ in range(STREAMS)], tokens(QUESTION), tokens(n + 2 * TILE + 5)
    streams, unified = Context(model, streams=STREAMS, unified=False), Context(model, streams=STREAMS, unified=True)

    def tiled(ctx: Context, read: dict[int, tuple[int, list[int]]], seq: int = 0, piece: int = TILE,
              pad: bool = True, cuts: tuple[int, ...] = ()) -> np.ndarray:
        ctx.clear()
        done = 0
        for cut in cuts:  # the state's head alone first, piece by piece, then the rest
            ctx.read({seq: (done, read[seq][1][done:cut])}, piece)
            done = cut
        ctx.read({s: ((done, t[done:]) if s == seq else (st, t)) for s, (st, t) in read.items()}, piece, pad=pad)
        return ctx.ask({s: (st + len(t), question) for s, (st, t) in read.items()})[seq]

    alone = {0: (0, states[0])}
    reference = tiled(streams, alone)
    results = [
        ("beside 3 other streams' states", True, tiled(streams, {s: (0, states[s]) for s in range(STREAMS)})),
        ("in stream 2, beside 3 others", True, tiled(streams, {2: (0, states[0]), 0: (0, states[2]),
                                                             1: (0, states[1]), 3: (0, states[3])}, seq=2)),
        ("cut at 100 tokens, then the rest", True, tiled(streams, alone, cuts=(100,))),
        ("cut at 64 and 150", True, tiled(streams, alone, cuts=(64, 150))),
        ("beside a state 2 tiles longer", True, tiled(streams, {0: (0, states[0]), 1: (0, longer)})),
        ("per-row kernel (60-row pieces): control", False, tiled(streams, alone, piece=PER_ROW)),
        ("last piece unpadded: control", False, tiled(streams, alone, pad=False)),
    ]
    agreed = [(what, expect, bool(np.array_equal(got, reference))) for what, expect, got in results]
    unified.clear()  # the cell-placement control: a unified cache, tiled, behind another sequence's cells
    unified.read({0: (0, states[0])}, TILE)
    at_zero = unified.ask({0: (n, question)})[0]
    unified.clear()
    unified.read({1: (0, tokens(5))}, 5)
    unified.read({0: (0, states[0])}, TILE)
    agreed.append(("unified cache, cells 5 later: control", False,
                   bool(np.array_equal(unified.ask({0: (n, question)})[0], at_zero))))
    streams.clear()  # the reader design: read in a stream, moved as a blob, asked in a unified cache
    streams.read(alone, TILE)
    blob = streams.save_unified(0)
    moved = []
    for before in (0, 37):
        unified.clear()
        if before:
            unified.read({1: (0, tokens(before))}, before)
        unified.load(0, blob)
        moved.append(unified.ask({0: (n, question)} | ({1: (before, question)} if before else {}))[0])
    agreed.append(("blob into a unified cache, 37 cells of another sequence first", True,
                   bool(np.array_equal(moved[0], moved[1]))))
    return agreed


def timings(model, rng: random.Random, n_vocab: int, n: int, reps: int) -> dict[str, list[float]]:
    """Seconds to read STREAMS first-seen states of n tokens each way, taking turns."""
    streams, unified = Context(model, streams=STREAMS, unified=False), Context(model, streams=STREAMS, unified=True)
    took: dict[str, list[float]] = {}
    for rep in range(reps + 1):  # the first round warms up and is not counted
        states = {s: (0, [rng.randrange(n_vocab // 10, n_vocab // 2) for _ in range(n)]) for s in range(STREAMS)}
        ways = {
            "one after another, 60-row pieces (per-row)": lambda: [unified.read({s: st}, PER_ROW)
                                                                   for s, st in states.items()],
            "one after another, 64-row pieces (tiled)": lambda: [streams.read({s: st}, TILE)
                                                                 for s, st in states.items()],
            "side by side, 64 rows a stream (tiled)": lambda: streams.read(states, TILE),
            "side by side tiled, then moved as blobs": lambda: (streams.read(states, TILE),
                                                                [unified.load(s, streams.save_unified(s)) for s in states]),
        }
        for name, way in ways.items():
            streams.clear()
            unified.clear()
            start = time.perf_counter()
            way()
            if rep:
                took.setdefault(name, []).append(time.perf_counter() - start)
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, default=384, help="tokens a state (W3's are 300-700)")
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    settings = load_settings()
    gguf = resolve_model(serving_profile(settings),
                         settings.cache_path, settings.model)
    print(f"{gguf.name}: load average {os.getloadavg()[0]:.2f} at the start", flush=True)
    model = load_model(gguf)
    lib, rng = llama(), random.Random(11)
    n_vocab = lib.llama_vocab_n_tokens(lib.llama_model_get_vocab(model))
    print(f"bit for bit, question {QUESTION} tokens after a {args.tokens - 57}-token state:")
    results = checks(model, rng, n_vocab, args.tokens - 57)  # a state that ends inside a tile
    for what, expect, agreed in results:
        verdict = "as expected" if agreed == expect else "NOT AS EXPECTED"
        print(f"  {'same' if agreed else 'differs':8s} {what}  ({verdict})")
    took = timings(model, rng, n_vocab, args.tokens, args.reps)
    base = statistics.median(next(iter(took.values())))
    print(f"{STREAMS} first-seen states of {args.tokens} tokens, median of {args.reps}:")
    for name, seconds in took.items():
        median = statistics.median(seconds)
        print(f"  {name:44s} {median:6.2f} s  {base / median:4.2f}x  ({', '.join(f'{s:.2f}' for s in seconds)})")
    print(f"load average {os.getloadavg()[0]:.2f} at the end")
    if any(agreed != expect for _, expect, agreed in results):
        raise SystemExit(1)


if __name__ == "__main__":
    main()
