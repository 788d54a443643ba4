"""Does the served margin equal llama.cpp's most exact reading of the same tokens, and where not, why.

    make bench NAME=exact [BENCH_ARGS="--every 4 --paths exact,served-det ..."]

Items: the yes/no items of eval/plain.jsonl's test split, a fixed subset (every --every-th yes item
and every --every-th no item, in file order; 8: 104 items, 4: 208). Each item is tokenized once, as the
gateway does (the profile's preamble + prefix with the state, then the suffix with the question),
and every path below reads those very ids, so the margins differ only in arithmetic. The margin is
the plain yes−no one (logsumexp over the profile's yes tokens − over its no tokens), without the
profile's learned head, which is a fixed linear function of the same logits columns.

The reference, `exact`: a plain llama.cpp context (worker/exact.py), the whole prompt in one llama_decode (n_batch =
n_ubatch = 512), K and V cached as F32 (type_k = type_v = GGML_TYPE_F32), flash attention off
(LLAMA_FLASH_ATTN_TYPE_DISABLED), the margin from llama.cpp's own logits row of the last token.
The other `raw-*` paths change one thing of that reading at a time (the cache type, flash
attention (on; llama.cpp then casts F32 K and V to F16), the prompt cut into the deterministic
mode's pieces of at most 60 rows, with the last
piece filled up by throwaway rows in another sequence). `exact-cut7` and `exact-cut13` are the
exact reading cut into pieces of 7 or 13 rows: F32, no flash attention, only other matmul kernels
(which quantize the activations to 8 bits in other groupings): how far the model's own margin moves
with the arithmetic alone, the floor no served path can be held below. The `served-*` paths are the engine as a
worker builds it (worker.process.build_engine: preamble pinned, canary run), answering one item
per batch as a lone client would have it answered: first seen (`fresh`), with no preamble pinned,
a second time from its snapshot in cells (admission "first-miss", no host memory), or a second time
from host memory (admission "second-miss": the first miss is saved there, the second restores it).

Per path: median and largest |Δ margin| against `exact`, Pearson and Spearman, AUC; progress on stderr.
"""
from __future__ import annotations

import argparse
import math
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import numpy as np
from tqdm import tqdm

from quality.items import Item, load_set
from quality.metrics import auc
from shared.config import default_settings
from shared.config import replace as with_settings
from shared.derive import serving_profile
from shared.llama import llama, load_model
from shared.llama import tokenize as tokenize_in
from shared.profiles import Profile, answer_ids, encode_prefix, encode_suffix
from worker import canary
from worker.engine import UBATCH
from worker.exact import ExactReader
from worker.job import Job
from worker.process import build_engine

EVAL_SET = "eval/plain.jsonl"


@dataclass(frozen=True)
class Prompt:
    item: Item
    prefix: list[int]
    suffix: list[int]


def held_out(every: int) -> list[Item]:
    """The fixed subset: every `every`-th yes item and every `every`-th no item of the test split."""
    items = [i for i in load_set(EVAL_SET, split="test") if i.type == "noul"]
    return [i for answer in (True, False) for i in [x for x in items if x.answer is answer][::every]]


# name -> (kv type, flash attention, pieces (True: the deterministic mode's; a number: that many rows
# each, whatever the shape rules say), padding rows)
RAW_PATHS = {
    "exact": ("f32", False, False, False),
    "exact-cut7": ("f32", False, 7, False),  # the exact reading's own spread: other matmul kernels
    "exact-cut13": ("f32", False, 13, False),
    "raw-f16-fa": ("f16", True, False, False),  # llama.cpp's default reading on this CPU
    "raw-f16": ("f16", False, False, False),
    "raw-f16-fa-pieces-nopad": ("f16", True, True, False),
    "raw-f16-fa-pieces": ("f16", True, True, True),
    "raw-f32-pieces": ("f32", False, True, True),
}
# name -> (mode, how: fresh | nopre | cells | ram)
SERVED_PATHS = {f"served-{'det' if mode == 'deterministic' else 'fast'}-{how}": (mode, how)
                for mode in ("deterministic", "fast") for how in ("fresh", "nopre", "cells", "ram")}
DEFAULT_PATHS = [*[p for p in RAW_PATHS if p != "raw-f32-pieces"],
                 *[p for p, (mode, how) in SERVED_PATHS.items()
                   if mode == "deterministic" or how in ("fresh", "cells")]]


def served(profile: Profile, path, prompts: list[Prompt], mode: str, how: str, threads: int,
           progress: Callable[[], None]) -> list[float]:
    """Margins from the engine as a worker builds it, one item per batch."""
    settings = with_settings(default_settings(), mode=mode, threads=threads,
                             state_cache_admission="first-miss" if how == "cells" else "second-miss",
                             state_cache_ram_mb=0 if how in ("cells", "fresh", "nopre") else 2048)
    canary.EXACT_TOLERANCE = math.inf  # measure what the start-up canary's check_exact would refuse too
    engine = build_engine(settings, profile, path, threads, pin_preamble=how != "nopre")
    yes, no = answer_ids(engine.tokenize, profile.yes), answer_ids(engine.tokenize, profile.no)
    out = []
    try:
        for p in prompts:
            job = Job(prefix=p.prefix, suffixes=[p.suffix], yes_ids=yes, no_ids=no)
            if how in ("cells", "ram"):  # the first reading keeps the prefix; the second is served from it
                engine.run([Job(prefix=p.prefix, suffixes=[p.suffix], yes_ids=yes, no_ids=no)])
            engine.run([job])
            if how in ("cells", "ram") and job.reused != len(p.prefix):
                raise RuntimeError(f"{how}: {p.item.id} reused {job.reused} of {len(p.prefix)} prefix tokens")
            out.append(job.margins[0])
            progress()
    finally:
        engine.close()
    return out


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.corrcoef(np.argsort(np.argsort(a)), np.argsort(np.argsort(b)))[0, 1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.exact", description=__doc__.splitlines()[0])
    parser.add_argument("--every", type=int, default=8, help="every N-th yes and no item of the test split")
    parser.add_argument("--paths", default="",
                        help="comma-separated paths (default: DEFAULT_PATHS); exact is always read")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)
    settings = default_settings()
    profile = serving_profile(settings, head=False)
    from jevfleet.harness.engine import model_of

    path = model_of(settings)[1]
    wanted = [p for p in args.paths.split(",") if p] or DEFAULT_PATHS
    unknown = set(wanted) - set(RAW_PATHS) - set(SERVED_PATHS)
    if unknown:
        parser.error(f"unknown path(s) {', '.join(sorted(unknown))}; known: {', '.join([*RAW_PATHS, *SERVED_PATHS])}")
    wanted = ["exact", *[p for p in wanted if p != "exact"]]
    items = held_out(args.every)
    lib = llama()
    model = load_model(path)
    vocab = lib.llama_model_get_vocab(model)

    tokenize = partial(tokenize_in, vocab)
    yes, no = answer_ids(tokenize, profile.yes), answer_ids(tokenize, profile.no)
    prompts = [Prompt(i, encode_prefix(tokenize, profile, profile.preamble + profile.prefix.format(state=i.state)),
                      encode_suffix(tokenize, profile, profile.suffix.format(question=i.question))) for i in items]
    labels = np.array([i.answer for i in items])
    load_before = os.getloadavg()
    started = time.monotonic()
    print(f"# python -m bench.exact: {path.name}, profile {profile.name} (yes−no margin, no head), llama.cpp from "
          f"{os.environ.get('LLAMA_CPP_LIB_PATH') or 'the venv'}, "
          f"{len(items)} items ({labels.sum()} yes) of {EVAL_SET} test, every {args.every}th; "
          f"{args.threads} threads; load {' '.join(f'{x:.2f}' for x in load_before)}", flush=True)
    margins: dict[str, np.ndarray] = {}
    for name in wanted:
        bar = tqdm(total=len(prompts), desc=name, file=sys.stderr, leave=False)
        t0 = time.monotonic()
        if name in RAW_PATHS:
            kv, flash, pieces, pad = RAW_PATHS[name]
            reader = ExactReader(model, threads=args.threads, yes=yes, no=no, type_k=kv, type_v=kv, flash=flash)
            try:
                got = []
                for p in prompts:
                    got.append(reader.margin(p.prefix + p.suffix, pieces=UBATCH if pieces is True else 0, pad=pad,
                                              cut=0 if pieces is True else int(pieces)))
                    bar.update()
            finally:
                reader.close()
        else:
            got = served(profile, path, prompts, *SERVED_PATHS[name], args.threads, bar.update)
        bar.close()
        margins[name] = np.array(got)
        print(f"#   {name}: {time.monotonic() - t0:.0f} s", file=sys.stderr, flush=True)
    print(table(margins, labels))
    print(f"# {time.monotonic() - started:.0f} s; load before {' '.join(f'{x:.2f}' for x in load_before)}, "
          f"after {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


def table(margins: dict[str, np.ndarray], labels: np.ndarray) -> str:
    ref = margins["exact"]
    lines = [f"{'path':<34}{'median |Δ|':>11}{'max |Δ|':>9}{'Pearson':>9}{'Spearman':>9}{'AUC':>7}",
             f"{'(margin std ' + format(ref.std(), '.3f') + ')':<34}"]
    for name, m in margins.items():
        d = np.abs(m - ref)
        lines.append(f"{name:<34}{np.median(d):>11.4f}{d.max():>9.4f}{np.corrcoef(m, ref)[0, 1]:>9.4f}"
                     f"{spearman(m, ref):>9.4f}{auc(m, labels):>7.3f}")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
