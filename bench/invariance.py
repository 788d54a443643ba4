"""Which micro-batch shapes give a token row the same logits wherever it sits in a micro-batch.

    make bench NAME=invariance [BENCH_ARGS="--model PATH.gguf"]   # every configuration of CONFIGS, one child each
    python -m bench.invariance --one [--repack 0|1] [--tiled 0|1] [--shapes 8,12,48] [--trials N] [--shift]
                                     [--outputs 8,12]

One process per configuration (ggml reads GGML_CPU_TILED_MM once). A target sequence of tokens
is decoded again and again, each time cut differently and mixed with rows of other sequences so
that its rows land at other places in micro-batches whose sizes are drawn from --shapes; the
logits of its last token (the whole vocabulary row) must match the first run bit for bit. Prints
how many layouts differed and by how much, and the time of a 384-token read in those shapes.
With --shift every trial cuts the target alike (trial 0's layout) and only where its cells sit
moves: trial k first fills k cells with another sequence, so the target's cells start k cells
further on and its rows keep their places in the micro-batches. With --outputs the micro-batch of
the target's last token has that many output rows (drawn from the list; trial 0: the first).
Not run by the tests; docs/architecture.md says what it found.
"""
from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from shared.config import env_var


# (repack, tiled, shapes, more arguments): the deterministic mode's rule (multiples of 4, 8..60), the
# old deterministic mode (no repacking, no tiled matmul), shapes that break each kernel's rule, the
# target's cells moved under 60-row and 64-row micro-batches, and the number of output rows beside
# the target's (the last layer's FFN runs on them only) within the rule and outside it
RULE = "8,12,20,28,36,44,52,60"
CONFIGS = [(1, 1, RULE), (1, 1, "60,8,12"), (1, 1, "16,32,48"), (0, 0, "32"),
           (1, 1, "5,7,13,30"), (1, 1, "8,4"), (1, 1, "64"), (1, 1, "60", "--shift"), (1, 1, "64", "--shift"),
           (1, 1, RULE, "--outputs", "8,12,20"), (1, 1, RULE, "--outputs", "1,2,4,5")]


def model_file() -> Path:
    """The configured profile's GGUF. Imported here, not at the top: llama.cpp must be loaded after
    GGML_CPU_TILED_MM is set."""
    from jevfleet.harness.engine import model_of
    from shared.config import load_settings

    return model_of(load_settings())[1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.invariance", description=__doc__.splitlines()[0])
    parser.add_argument("--one", action="store_true", help="run one configuration in this process")
    parser.add_argument("--repack", type=int, default=1, help="weight repacking (use_extra_bufts)")
    parser.add_argument("--tiled", type=int, default=1, help="GGML_CPU_TILED_MM")
    parser.add_argument("--shapes", default="8,12,60", help="allowed micro-batch row counts")
    parser.add_argument("--trials", type=int, default=16)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--shift", action="store_true", help="same layout each trial, the cells moved instead")
    parser.add_argument("--outputs", default="1",
                        help="allowed numbers of output rows in the micro-batch of the target's output row")
    parser.add_argument("--model", default="", help="a GGUF file (default: the configured profile's)")
    args = parser.parse_args(argv)
    if args.model:  # through the environment, so the configuration's children measure the same file
        os.environ[env_var("model")] = str(Path(args.model).resolve())
    if not args.one:
        print(f"# python -m bench.invariance, {model_file().name} (load {os.getloadavg()[0]:.1f})", flush=True)
        for repack, tiled, shapes, *more in CONFIGS:
            subprocess.run([sys.executable, "-m", "bench.invariance", "--one", "--repack", str(repack), "--tiled",
                            str(tiled), "--shapes", shapes, "--trials", str(args.trials), "--threads",
                            str(args.threads), *more], check=True)
        return 0
    os.environ["GGML_CPU_TILED_MM"] = str(args.tiled)
    import llama_cpp as lib

    shapes = [int(s) for s in args.shapes.split(",")]
    outputs = [int(s) for s in args.outputs.split(",")]
    lib.llama_backend_init()
    quiet = lib.llama_log_callback(lambda *_: None)  # kept alive while llama.cpp may call it
    lib.llama_log_set(quiet, None)
    mparams = lib.llama_model_default_params()
    mparams.use_extra_bufts = bool(args.repack)
    mdl = lib.llama_model_load_from_file(str(model_file()).encode(), mparams)
    cparams = lib.llama_context_default_params()
    cparams.n_ctx = 4096
    cparams.n_batch = cparams.n_ubatch = max(shapes)
    cparams.n_seq_max = 8
    cparams.n_threads = cparams.n_threads_batch = args.threads
    cparams.flash_attn_type = lib.LLAMA_FLASH_ATTN_TYPE_ENABLED
    cparams.kv_unified = True
    cparams.swa_full = True
    ctx = lib.llama_init_from_model(mdl, cparams)
    mem = lib.llama_get_memory(ctx)
    n_vocab = lib.llama_vocab_n_tokens(lib.llama_model_get_vocab(mdl))
    batch = lib.llama_batch_init(max(shapes), 0, 1)
    rng = random.Random(args.seed)
    target = [2] + [rng.randrange(1000, 30000) for _ in range(70)]

    def decode(rows: list[tuple[int, int, int, int]]) -> np.ndarray | None:
        """rows: (token, pos, seq, output: 0 no, 1 the target's, 2 another); returns the logits
        row of the target's output row."""
        for i, (tok, pos, seq, out) in enumerate(rows):
            batch.token[i], batch.pos[i], batch.n_seq_id[i] = tok, pos, 1
            batch.seq_id[i][0], batch.logits[i] = seq, bool(out)
        batch.n_tokens = len(rows)
        if lib.llama_decode(ctx, batch) != 0:
            raise RuntimeError("llama_decode failed")
        for i, row in enumerate(rows):
            if row[3] == 1:
                return np.ctypeslib.as_array(lib.llama_get_logits_ith(ctx, i), shape=(n_vocab,)).copy()
        return None

    def layout(trial: int) -> list[list[tuple[int, int, int, bool]]]:
        """The target's rows in order, cut at random, each micro-batch filled up with rows of
        other sequences before and after to a size from `shapes` (trial 0: target alone,
        first shape, the end padded)."""
        stream = [(tok, pos, 0, int(pos == len(target) - 1)) for pos, tok in enumerate(target)]
        fill_pos = {s: 0 for s in range(1, 6)}

        def filler(n: int) -> list[tuple[int, int, int, bool]]:
            out = []
            for _ in range(n):
                seq = rng.randrange(1, 6)
                out.append((rng.randrange(1000, 30000), fill_pos[seq], seq, 0))
                fill_pos[seq] += 1
            return out

        out, at = [], 0
        while at < len(stream):
            size = shapes[0] if trial == 0 else rng.choice(shapes)
            take = min(len(stream) - at, size if trial == 0 else rng.randint(1, size))
            before = 0 if trial == 0 else rng.randint(0, size - take)
            out.append(filler(before) + stream[at:at + take] + filler(size - take - before))
            at += take
        last = out[-1]  # llama.cpp's last layer runs its FFN on the output rows only
        wanted = min(len(last), outputs[0] if trial == 0 or len(outputs) == 1 else rng.choice(outputs))
        if wanted > 1:
            others = [i for i, row in enumerate(last) if not row[3]]
            for i in rng.sample(others, wanted - 1):
                last[i] = (*last[i][:3], 2)
        return out

    results, worst, differed = [], 0.0, 0
    for trial in range(args.trials):
        lib.llama_memory_clear(mem, True)
        got = None
        if args.shift and trial:  # `trial` cells of another sequence below the target's (their shape does not matter)
            decode([(5, p, 6, False) for p in range(trial)])
        for rows in layout(0 if args.shift else trial):
            logits = decode(rows)
            got = logits if logits is not None else got
        results.append(got)
        if trial:
            gap = float(np.max(np.abs(got - results[0])))
            differed += gap != 0.0
            worst = max(worst, gap)
    # speed: a 384-token read of one sequence, cut into the largest shape
    size = max(shapes)
    read = [(rng.randrange(1000, 30000), p, 0, p == 383) for p in range(384)]
    times = []
    for _ in range(3):
        lib.llama_memory_clear(mem, True)
        t = time.perf_counter()
        for i in range(0, 384, size):
            rows = read[i:i + size]
            rows += [(5, p, 1, False) for p in range(size - len(rows))]
            decode(rows)
        times.append((time.perf_counter() - t) * 1000)
    label = (" shifted" if args.shift else "") + (f" outputs={args.outputs}" if args.outputs != "1" else "")
    print(f"repack={args.repack} tiled={args.tiled} shapes={args.shapes}{label}: "
          f"{differed}/{args.trials - 1} layouts differ (largest logit gap {worst:.3g}); "
          f"384-token read in {size}-row pieces {min(times):.0f} ms (load {os.getloadavg()[0]:.1f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
