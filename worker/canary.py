"""The start-up canary: before a worker (or `decide`, `eval`) answers anything, it checks on this
model, this build of llama.cpp and this CPU what its answers rest on, instead of trusting it.

- llama.cpp's graph has a node named result_norm and stops there when the eval callback says so
  (worker/hidden.py; HiddenTap.take raises when the node never showed);
- the answer columns computed from that hidden state, rounded as llama.cpp rounds it for this
  output matrix (OutputMatrix.as_llama_rounds), and SPREAD columns spread over the vocabulary,
  are llama.cpp's own logits (its output matmul let finish once, here) within TOLERANCE of the
  largest |logit| among them: a wrong node, a changed output matrix or a step after the matmul
  the readout lacks shows as a gap (answers are read with Q8_0 rounding whatever the matrix,
  worker/hidden.py says why: ~1 % of the largest logit from llama.cpp's row for a K-quant one);
- in deterministic mode, the same probe read alone and in two batches of other shapes (batch mates
  that move its rows to other places in other micro-batches) gives bit-identical margins, the
  promise the micro-batch shape rules of worker/pieces.py keep on the CPUs they were measured on;
- and the first time a model file runs on a CPU and llama.cpp build, LAYOUTS more such batches:
  the shape rules were read from the kernels Gemma's weights take and measured on one CPU, and a
  GGUF of other weight types or another CPU may take kernels with rules of their own. The result
  is kept under cache_dir/shapes/ by model digest and CPU flags (shape_record), so the
  measurement runs once; a record of a margin that moved refuses deterministic mode at once;
- the served margins of three prompts against llama.cpp's most exact reading of their tokens
  (check_exact), kept under cache_dir/exact/ by everything both readings depend on (exact_record):
  measured on the first start of a file (or by its calibration fit), read on later ones.

Invariant: a worker whose canary fails does not serve; the error names the check in one line.
The canary's runs are warm runs (worker/engine.py): no snapshot is left behind.
"""
from __future__ import annotations

import hashlib
import json
import os
import platform
import random
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from shared.llama import llama
from shared.profiles import Profile
from worker.engine import UBATCH, Engine
from worker.exact import ExactReader, reader_length
from worker.head import yes_no_margin
from worker.job import Job
from worker.pieces import MIN_ROWS, ROW_STEP
from worker.warmup import make_job

# A logit from h against llama.cpp's, relative to the row's scale (its largest |logit| among the
# columns compared), since the gap grows with the logits (llama.cpp's float sums differ from ours
# by rounding; its output matmul rounds differently with the number of rows in the call).
# Measured: Gemma 3 270M (Q8_0) up to 6.8e-3 absolute over 2,744 prompts (tests/test_readout.py),
# its logits up to ~20; the zoo's Q4_K_M files (bench/zoo.py, docs/benchmarks.md): see there.
TOLERANCE = 0.002
SPREAD = 1024  # columns compared besides the answer tokens', evenly spaced over the vocabulary
PROBE = ("Order 5521 from Lena: the kettle arrived with a cracked lid, please send a new one.",
         "Is the kettle damaged?")
MATES = [("The meeting moved to Thursday.", ["Is the meeting on Monday?"]),
         ("Invoice 88 for 240 euros was paid by card on Friday; the receipt went to the office in Porto.",
          ["Was the invoice paid?", "Was it paid in cash?", "Is the office in Lisbon?"]),
         ("Hi", ["Is this a greeting?"])]
LAYOUTS = 12  # batch-mate layouts measured once per model file, CPU and build (shape_record)
# The shape rules a record was measured under (part of its name: a record of older rules is not read)
RULES = f"rows and output rows: multiples of {ROW_STEP} from {MIN_ROWS} to {UBATCH}"
EXACT_PROMPTS = [PROBE, (MATES[0][0], MATES[0][1][0]), (MATES[1][0], MATES[1][1][0])]
# The median of the served yes−no margins' distances from llama.cpp's exact reading of their tokens may
# be this share of the exact margins' root mean square (their scale). Not a few hundredths: the exact
# reading itself moves by 12 % (7-row pieces) and 22 % (13-row pieces) of the scale on these prompts
# when only its micro-batch cut changes (`make bench NAME=exact`, docs/architecture.md); the served path
# is at 14 %. This catches a model file, a readout or a build that reads prompts otherwise.
EXACT_TOLERANCE = 0.4


class CanaryError(RuntimeError):
    """What the canary found wrong, in one line."""


@dataclass(frozen=True)
class CanaryReport:
    output_type: str  # the output matrix's tensor type (Q8_0 is the rounding the readout mirrors)
    max_logit_gap: float  # largest |logit from h − llama.cpp's logit| ÷ largest |logit|, columns compared
    decode_calls: tuple[int, ...]  # llama_decode calls of each run: alone, then among batch mates
    layouts_measured: int  # more layouts run for the shape record (0: none, or read from the record)
    seconds: float
    arithmetic: str  # arithmetic_digest of the probe read alone: what the gateway compares across workers


def _probe(engine: Engine, profile: Profile) -> Job:
    return make_job(engine, profile, PROBE[0], [PROBE[1]])


def _run(engine: Engine, jobs: list[Job]) -> int:
    """One warm batch; the llama_decode calls it made."""
    before = engine.decode_calls
    engine.run(jobs, warm=True)
    return engine.decode_calls - before


def _moved_among(engine: Engine, profile: Profile, alone: Job, mates: list[tuple[str, list[str]]], at: int) -> int:
    """The probe read again with `mates` around it (it goes at index `at`): CanaryError when its
    margins are not bit for bit those it got alone; the llama_decode calls of the batch."""
    batch = [make_job(engine, profile, state, questions) for state, questions in mates]
    probe = _probe(engine, profile)
    batch.insert(at, probe)
    calls = _run(engine, batch)
    if probe.margins != alone.margins:
        raise CanaryError(
            f"start-up canary: deterministic mode is not deterministic here: the probe's margin "
            f"{alone.margins[0]!r} alone became {probe.margins[0]!r} among {len(mates)} batch mate(s); "
            "run with --mode fast")
    return calls


def layout_mates(k: int) -> list[tuple[str, list[str]]]:
    """Layout k's batch mates: 1-3 requests of 1-60 words and 1-3 questions each, drawn from seed
    k, so that the probe's rows land at other places in other micro-batches in every layout."""
    rng = random.Random(k)
    words = "the order parcel invoice was late paid sent broken to our office on Monday in Porto and".split()
    return [(" ".join(rng.choice(words) for _ in range(rng.randint(1, 60))),
             [f"Is it {rng.choice(words)}?" for _ in range(rng.randint(1, 3))]) for _ in range(rng.randint(1, 3))]


# Our modules that decide how a prompt's tokens become a margin: which cells, which pieces, which rows.
READING_CODE = ("engine.py", "tiled_reader.py", "pieces.py", "hidden.py", "head.py", "exact.py", "snapshots.py",
                "snapshot_moves.py")


def _build() -> str:
    """This CPU, this llama.cpp build, the shape rules (RULES) and our reading code's digest: what
    picks the kernels a row goes through, and how we feed them. A change to the reading code with
    the same llama.cpp measures again, rather than reading figures another reading made (worked out
    at each call, not cached: the files are read as they are now; tests/test_canary.py changes one)."""
    lib = llama()
    here = Path(__file__).parent
    code = _digest("".join((here / name).read_text() for name in READING_CODE))
    return f"{platform.machine()} {lib.__version__} {lib.llama_print_system_info().decode()} {RULES} {code}"


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _keep(record: Path, figures: dict) -> None:
    """Write a record whole (several workers may measure at once: each writes all of it)."""
    record.parent.mkdir(parents=True, exist_ok=True)
    tmp = record.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(json.dumps({**figures, "measured": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}))
    os.replace(tmp, record)


def shape_record(cache_dir: Path, model_sha256: str) -> Path:
    """Where the layouts measured for this model file, this CPU and this llama.cpp build are kept:
    the three things that pick the kernels a row goes through; and the shape rules (RULES)."""
    return cache_dir / "shapes" / f"{model_sha256[:16]}-{_digest(_build())}.json"


def _measure_once(engine: Engine, profile: Profile, alone: Job, record: Path) -> int:
    """LAYOUTS more layouts the first time (CanaryError on a moved margin, kept as such), none
    once `record` says they agreed; the number of layouts run."""
    if record.is_file():
        if json.loads(record.read_text())["differed"]:
            raise CanaryError(f"start-up canary: deterministic mode is not deterministic here ({record} measured a "
                              "margin that moved among batch mates); run with --mode fast")
        return 0
    failure = None
    start = time.monotonic()
    try:
        for k in range(LAYOUTS):
            mates = layout_mates(k)
            _moved_among(engine, profile, alone, mates, k % (len(mates) + 1))
    except CanaryError as exc:
        failure = exc
    _keep(record, {"rules": RULES, "layouts": LAYOUTS, "differed": failure is not None, "profile": profile.name,
                   "seconds": round(time.monotonic() - start, 1)})
    if failure:
        raise failure
    return LAYOUTS


def readout_columns(n_vocab: int, answer_ids: list[int]) -> np.ndarray:
    """The columns the readout check compares: the answer tokens' and SPREAD spread over the
    vocabulary, which give the row's scale."""
    spread = np.linspace(0, n_vocab - 1, min(SPREAD, n_vocab)).astype(np.int64)
    return np.union1d(spread, np.asarray(answer_ids, dtype=np.int64))


def readout_gap(ours: np.ndarray, theirs: np.ndarray) -> float:
    """Largest |ours − theirs| over the columns, as a fraction of the largest |theirs| (inf when
    llama.cpp's row is all zeros or not finite)."""
    scale = float(np.abs(theirs).max())
    gap = float(np.abs(ours - theirs).max())
    return gap / scale if scale > 0 and np.isfinite(scale) else float("inf")


def arithmetic_digest(probe: Job) -> str:
    """A digest of the exact bits of the probe's answer read alone: its margin, and the captured
    columns of its last row from our readout and from llama.cpp's output matmul, which show what
    the margin's Q8_0 round trip of h hides. Other kernels (another instruction-set level, another
    compiler) show here; equal digests: a request gets the same bits on either worker."""
    digest = hashlib.sha256(np.asarray(probe.margins, dtype=np.float64).tobytes())
    digest.update(np.asarray(probe.features[0], dtype=np.float64).tobytes())
    digest.update(np.asarray(probe.reference[0][0], dtype=np.float64).tobytes())
    return digest.hexdigest()[:16]


def run_canary(engine: Engine, profile: Profile, record: Path | None = None) -> CanaryReport:
    """Check the engine as the module docstring says; CanaryError on the first check that fails.
    record: shape_record()'s file (deterministic mode), measured once and then read."""
    started = time.monotonic()
    alone = _probe(engine, profile)
    ids = readout_columns(engine.n_vocab, alone.yes_ids + alone.no_ids)
    saved_capture = engine.readout.capture
    engine.readout.capture, engine.tap.full_logits, engine.readout.as_llama = ids, True, True
    try:
        calls = [_run(engine, [alone])]
    finally:
        engine.readout.capture, engine.tap.full_logits, engine.readout.as_llama = saved_capture, False, False
    gap = readout_gap(alone.features[0], alone.reference[0][0])
    if not gap <= TOLERANCE:
        raise CanaryError(f"start-up canary: the answer logits read from the hidden state differ from llama.cpp's "
                          f"own by {gap:.3g} of the largest logit (tolerance {TOLERANCE}); the readout does not fit "
                          "this model or build")
    measured = 0
    if engine.deterministic:
        for mates in (MATES[:1], MATES[1:]):
            calls.append(_moved_among(engine, profile, alone, mates, 1))
        measured = _measure_once(engine, profile, alone, record) if record else 0
    return CanaryReport(output_type=engine.readout.matrix.type_name, max_logit_gap=gap, decode_calls=tuple(calls),
                        layouts_measured=measured, seconds=time.monotonic() - started,
                        arithmetic=arithmetic_digest(alone))


@dataclass(frozen=True)
class ExactReport:
    share: float  # median |served margin − exact margin| over the exact margins' scale
    measured: bool  # False: read from the record of an earlier start (exact_record)


def exact_record(cache_dir: Path, model_sha256: str, engine: Engine, head: str, prompts: list[list[int]]) -> Path:
    """Where check_exact's figures are kept: by model file, build (_build), the engine's mode,
    threads and cells, the head file and the prompts' tokens (the profile's rendering and answer
    tokens), everything the served and the exact margins of these tokens depend on. The same
    inputs give the same figures, so a worker started after another, or after the calibration fit
    that loads the model as a worker does, reads them instead of spending the check's two readings
    of three ~600-token prompts again (33 s of MiniCPM 1B's 75 s start)."""
    lib = llama()
    head_digest = hashlib.sha256(Path(head).read_bytes()).hexdigest() if head else ""
    key = json.dumps([_build(), engine.deterministic, lib.llama_n_threads(engine.ctx_ptr),
                      lib.llama_n_ctx(engine.ctx_ptr), head_digest, prompts])
    return cache_dir / "exact" / f"{model_sha256[:16]}-{_digest(key)}.json"


def _exact_figures(engine: Engine, jobs: list[Job], prompts: list[list[int]]) -> tuple[float, float]:
    """The median distance of the served margins from the exact ones, and the exact margins' root
    mean square: the jobs answered by the engine (yes−no margins from h, whatever head it serves)
    and their prompts read by llama.cpp's most exact reading (worker/exact.py)."""
    ids = sorted(set(jobs[0].yes_ids) | set(jobs[0].no_ids))
    saved_capture, engine.readout.capture = engine.readout.capture, np.array(ids, dtype=np.int64)
    try:
        engine.run(jobs, warm=True)
    finally:
        engine.readout.capture = saved_capture
    column = dict(zip(ids, range(len(ids))))
    served = np.array([yes_no_margin(lambda t, job=job: job.features[0][column[t]], job.yes_ids, job.no_ids)
                       for job in jobs])
    reader = ExactReader(engine.model, threads=llama().llama_n_threads(engine.ctx_ptr), yes=jobs[0].yes_ids,
                         no=jobs[0].no_ids, longest=reader_length(max(map(len, prompts))))
    try:
        exact = np.array([reader.margin(prompt) for prompt in prompts])
    finally:
        reader.close()
    return float(np.median(np.abs(served - exact))), float(np.sqrt(np.mean(exact ** 2)))


def check_exact(engine: Engine, profile: Profile, *, refuse: bool = True, cache_dir: Path | None = None,
                model_sha256: str = "") -> ExactReport:
    """EXACT_PROMPTS served and read exactly (_exact_figures), or their figures read from
    exact_record when `cache_dir` is given and they were kept there: CanaryError (when `refuse`)
    when the median distance is more than EXACT_TOLERANCE × the exact margins' scale, which
    differs from model to model."""
    jobs = [make_job(engine, profile, state, [question]) for state, question in EXACT_PROMPTS]
    prompts = [job.prefix + job.suffixes[0] for job in jobs]
    record = exact_record(cache_dir, model_sha256, engine, profile.head, prompts) if cache_dir else None
    measured = record is None or not record.is_file()
    if measured:
        started = time.monotonic()
        gap, scale = _exact_figures(engine, jobs, prompts)
        if record:
            _keep(record, {"gap": gap, "scale": scale, "profile": profile.name,
                           "seconds": round(time.monotonic() - started, 1)})
    else:
        figures = json.loads(record.read_text())
        gap, scale = figures["gap"], figures["scale"]
    if refuse and not gap <= EXACT_TOLERANCE * scale:
        raise CanaryError(f"start-up canary: served margins differ from llama.cpp's exact reading of the same tokens "
                          f"by {gap:.3g} nats (median), more than {EXACT_TOLERANCE:.0%} of the margins' scale "
                          f"{scale:.3g}: the model file, the readout or the llama.cpp build reads prompts otherwise")
    return ExactReport(share=gap / scale, measured=measured)
