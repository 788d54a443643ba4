"""The start-up canary: before a worker (or `decide`, `eval`) answers anything, it checks on this
model, this build of llama.cpp and this CPU what its answers rest on, instead of trusting it.

- llama.cpp's graph has a node named result_norm and stops there when the eval callback says so
  (worker/hidden.py; HiddenTap.take raises when the node never showed);
- the answer columns computed from that hidden state are llama.cpp's own logits (its output
  matmul let finish once, here) within TOLERANCE: a wrong node, another rounding or a changed
  output matrix shows as a gap;
- in deterministic mode, the same probe read alone and in two batches of other shapes (batch mates
  that move its rows to other places in other micro-batches) gives bit-identical margins, the
  promise the micro-batch shape rules of worker/pieces.py keep on the CPUs they were measured on.

Invariant: a worker whose canary fails does not serve; the error names the check in one line.
The canary's runs are warm runs (worker/engine.py): no snapshot is left behind.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from shared.profiles import Profile
from worker.engine import Engine
from worker.job import Job
from worker.warmup import make_job

# A logit from h against llama.cpp's: tests/test_readout.py measured up to 6.8e-3 over 2,744 prompts
# (llama.cpp's output matmul rounds differently with the number of rows in the call).
TOLERANCE = 0.01
PROBE = ("Order 5521 from Lena: the kettle arrived with a cracked lid, please send a new one.",
         "Is the kettle damaged?")
MATES = [("The meeting moved to Thursday.", ["Is the meeting on Monday?"]),
         ("Invoice 88 for 240 euros was paid by card on Friday; the receipt went to the office in Porto.",
          ["Was the invoice paid?", "Was it paid in cash?", "Is the office in Lisbon?"]),
         ("Hi", ["Is this a greeting?"])]


class CanaryError(RuntimeError):
    """What the canary found wrong, in one line."""


@dataclass(frozen=True)
class CanaryReport:
    output_type: str  # the output matrix's tensor type (Q8_0 is the rounding the readout mirrors)
    max_logit_gap: float  # largest |logit from h − llama.cpp's logit| at the answer tokens
    decode_calls: tuple[int, ...]  # llama_decode calls of each run: alone, then among batch mates
    seconds: float


def _probe(engine: Engine, profile: Profile) -> Job:
    return make_job(engine, profile, PROBE[0], [PROBE[1]])


def _run(engine: Engine, jobs: list[Job]) -> int:
    """One warm batch; the llama_decode calls it made."""
    before = engine.decode_calls
    engine.run(jobs, warm=True)
    return engine.decode_calls - before


def run_canary(engine: Engine, profile: Profile) -> CanaryReport:
    """Check the engine as the module docstring says; CanaryError on the first check that fails."""
    started = time.monotonic()
    alone = _probe(engine, profile)
    ids = np.array(sorted(set(alone.yes_ids) | set(alone.no_ids)), dtype=np.int64)
    saved_capture = engine.readout.capture
    engine.readout.capture, engine.tap.full_logits = ids, True
    try:
        calls = [_run(engine, [alone])]
    finally:
        engine.readout.capture, engine.tap.full_logits = saved_capture, False
    ours, full = alone.features[0], alone.reference[0][0]
    gap = float(np.abs(ours - full).max())
    if not gap <= TOLERANCE:
        raise CanaryError(f"start-up canary: the answer logits read from the hidden state differ from llama.cpp's "
                          f"own by {gap:.3g} (tolerance {TOLERANCE}); the readout does not fit this model or build")
    if engine.deterministic:
        for mates in (MATES[:1], MATES[1:]):
            batch = [make_job(engine, profile, state, questions) for state, questions in mates]
            probe = _probe(engine, profile)
            calls.append(_run(engine, batch[:1] + [probe] + batch[1:]))
            if probe.margins != alone.margins:
                raise CanaryError(
                    f"start-up canary: deterministic mode is not deterministic here: the probe's margin "
                    f"{alone.margins[0]!r} alone became {probe.margins[0]!r} among {len(batch)} batch mate(s); "
                    "run with --mode fast")
    return CanaryReport(output_type=engine.readout.matrix.type_name, max_logit_gap=gap, decode_calls=tuple(calls),
                        seconds=time.monotonic() - started)
