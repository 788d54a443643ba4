"""The learned yes/no head: fitting (quality/head.py), saving and loading, reading it out of a
logits row (worker/head.py), its place in a profile, and — on the real model — that answers
with the head on stay bit-identical however a request is batched or served from a snapshot."""
from __future__ import annotations

import math
import random

import numpy as np
import pytest

from jevfleet.harness.engine import default_model, make_job, new_engine
from quality.calibration import write_section
from quality.head import feature_ids, fit_head, fit_logistic
from shared.profiles import load_profile
from worker.job import Job
from worker.head import Readout, load_head, logsumexp, make_head
from worker.hidden import q8_0_round_trip, q8_k_round_trip


def separable(n: int, dims: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Features where one direction carries the answer, plus noise columns."""
    rng = np.random.default_rng(seed)
    y = np.arange(n) % 2 == 0
    x = rng.normal(size=(n, dims))
    x[:, 3] += np.where(y, 1.5, -1.5)
    return x, y


def test_logistic_fit_finds_the_informative_column_and_the_penalty_shrinks_it():
    x, y = separable(200, 30, 0)
    w, b = fit_logistic(x, y.astype(float), 0.01)
    assert int(np.argmax(np.abs(w))) == 3 and w[3] > 0
    assert np.mean(((x @ w + b) > 0) == y) > 0.9
    w_strong, _ = fit_logistic(x, y.astype(float), 100.0)
    assert abs(w_strong[3]) < abs(w[3]) / 10


def test_fit_head_ranks_held_out_items_and_its_logit_is_the_fitted_function():
    x, y = separable(240, 40, 1)
    head, penalty, oof = fit_head(x[:160].astype(np.float32), y[:160], np.arange(100, 140))
    assert penalty > 0 and oof.shape == (160,)
    assert np.mean((oof > 0) == y[:160]) > 0.8  # out-of-fold, so not a memorised answer
    held = np.array([head.logit_of(row) for row in x[160:].astype(np.float32)])
    assert np.mean((held > 0) == y[160:]) > 0.8


def test_feature_ids_hold_the_answer_tokens_and_are_distinct_and_sorted():
    ids = feature_ids(50_000, [9230, 2838, 17], count=256)
    assert len(ids) == 256 and {9230, 2838, 17} <= set(ids.tolist())
    assert np.all(np.diff(ids) > 0) and ids[-1] < 50_000


def test_save_and_load_keep_the_head_and_its_digest(tmp_path):
    head = make_head(np.array([1, 5, 9]), np.array([0.5, -1.25, 2.0]), 0.125)
    path = tmp_path / "m.head.npz"
    head.save(path)
    loaded = load_head(path)
    assert np.array_equal(loaded.ids, head.ids) and np.array_equal(loaded.weights, head.weights)
    assert (loaded.bias, loaded.digest) == (head.bias, head.digest)
    other = make_head(np.array([1, 5, 9]), np.array([0.5, -1.25, 2.0]), 0.25)
    assert other.digest != head.digest


def test_a_malformed_head_file_is_refused(tmp_path):
    path = tmp_path / "bad.npz"
    np.savez(path, ids=np.array([1, 2]), weights=np.array([1.0]), bias=np.array(0.0))
    with pytest.raises(ValueError, match="not a head"):
        load_head(path)
    with pytest.raises(ValueError, match="outside"):
        Readout(Matrix(np.eye(10)), make_head(np.array([3, 12]), np.array([1.0, 1.0]), 0.0))


class Matrix:
    """An output matrix held in memory (worker/hidden.OutputMatrix reads a GGUF file)."""

    def __init__(self, w: np.ndarray) -> None:
        self.w, (self.n_vocab, self.n_embd) = w, w.shape

    def rows(self, ids) -> np.ndarray:
        return self.w[np.asarray(ids)].astype(np.float64)

    def row(self, token: int) -> np.ndarray:
        return self.rows([token])[0]

    def finish(self, logits):
        return logits


def test_readout_margin_plain_head_and_capture():
    # logits = h (W is I); multiples of 1/32 up to 127/32 come through the 8-bit rounding unchanged
    h = np.array([16, -32, 64, 8, -96, 48, 0, 127] + [0] * 24, dtype=np.float32) / 32
    job = Job(prefix=[], suffixes=[[1]], yes_ids=[2, 5], no_ids=[1, 4])
    plain = Readout(Matrix(np.eye(32))).margin(job, 0, h)
    assert plain == logsumexp([2.0, 1.5]) - logsumexp([-1.0, -3.0])
    head = make_head(np.array([0, 3, 7]), np.array([1.0, -2.0, 0.5]), 0.25)
    readout = Readout(Matrix(np.eye(32)), head)
    readout.capture = np.array([0, 3, 7])
    assert readout.margin(job, 0, h) == 0.25 + 0.5 - 0.5 + 127 / 64
    assert job.features[0].tolist() == [0.5, 0.25, 127 / 32]
    capture_only = Readout(Matrix(np.eye(32)))
    capture_only.capture = np.array([1])
    assert capture_only.margin(job, 0, h) == plain


def test_the_head_reads_its_columns_from_the_hidden_state():
    rng = np.random.default_rng(3)
    w = rng.normal(size=(50, 64))
    head = make_head(np.array([4, 9, 31]), np.array([0.5, -1.5, 2.0]), -0.25)
    h = rng.normal(size=64).astype(np.float32)
    readout = Readout(Matrix(w), head)
    columns = w[[4, 9, 31]] @ q8_0_round_trip(h)
    assert readout.margin(Job([], [[1]], [1], [2]), 0, h) == head.logit_of(columns)


def test_the_8_bit_rounding_is_ggmls_q8_0():
    """Per block of 32: scale max|x|/127 stored as float16, values rounded half away from zero."""
    h = np.zeros(64, dtype=np.float32)
    h[:3] = [127 / 64, 0.5 / 64 * 3, -1.5 / 64]  # 1.5 and -1.5 steps: half away from zero
    h[32:35] = [1e-3, -2e-3, 0.0]
    out = q8_0_round_trip(h)
    assert out[:3].tolist() == [127 / 64, 2 / 64, -2 / 64]
    scale = float(np.float16(np.float32(2e-3) / np.float32(127)))
    assert out[32:35].tolist() == [64 * scale, -127 * scale, 0.0]
    assert not q8_0_round_trip(np.zeros(32, np.float32)).any()


def test_the_8_bit_rounding_of_a_k_quant_matmul_is_ggmls_q8_k():
    """Per block of 256: iscale -127 / the value of largest magnitude, half to even, 1/iscale back."""
    h = np.zeros(512, dtype=np.float32)
    h[:4] = [127 / 64, 1.5 / 64, 2.5 / 64, -2.5 / 64]  # iscale -64: -1.5 -> -2, -2.5 -> -2, 2.5 -> 2
    h[256:259] = [-127 / 64, 1.5 / 64, 0.5 / 64]  # a negative peak: iscale 64, 1.5 -> 2, 0.5 -> 0
    out = q8_k_round_trip(h)
    assert out[:4].tolist() == [127 / 64, 2 / 64, 2 / 64, -2 / 64]
    assert out[256:259].tolist() == [-127 / 64, 2 / 64, 0.0] and not out[259:].any()
    assert not q8_k_round_trip(np.zeros(256, np.float32)).any()


PROFILE = """name = "p"
[prompt]
prefix = "T: {state}\\n"
suffix = "Q: {question}\\nA:"
default_question = "?"
choice_question = "{instructions} {option}"
score_question = "{instructions} {level}"
choice_default = "c"
score_default = "s"
option_described = "{name} ({text})"
yes = [" Yes"]
no = [" No"]

[calibration]
scale = 0.5  # margin
bias = 0.1
"""


def test_profile_head_section_switches_calibration_and_file(tmp_path):
    path = tmp_path / "p.toml"
    path.write_text(PROFILE)
    assert load_profile(str(path)).head == ""
    with pytest.raises(ValueError, match=r"head.file is empty"):
        load_profile(str(path), head=True)
    write_section(path, "head", {"file": "p.head.npz", "scale": 0.9, "bias": -0.2, "enabled": False})
    assert "scale = 0.5  # margin\n" in path.read_text()  # the margin's calibration is untouched
    off = load_profile(str(path))
    assert (off.head, off.scale, off.bias) == ("", 0.5, 0.1)
    on = load_profile(str(path), head=True)
    assert (on.head, on.scale, on.bias) == (str(tmp_path / "p.head.npz"), 0.9, -0.2)
    write_section(path, "head", {"enabled": True})
    assert load_profile(str(path)).head == on.head


# --- on the real model --------------------------------------------------------------------------

STATES = ["My card was charged twice for the March invoice.", "The app crashes at start since the update.",
          "Where is my parcel? It is a week late and tracking has not moved."]
QUESTIONS = ["Is this about billing?", "Is the customer angry?", "Is the parcel late?"]


@pytest.fixture(scope="module")
def engines():
    """A fresh engine (no snapshots) and a pinned, snapshotting one, both with one random head."""
    profile, _ = default_model()
    fresh = new_engine(ctx=1024, state_cache=0)
    cached = new_engine(ctx=1024, state_cache=3, state_cache_tokens=900)
    yes = sorted({fresh.tokenize(w)[0] for w in profile.yes} | {fresh.tokenize(w)[0] for w in profile.no})
    ids = feature_ids(fresh.n_vocab, yes, count=700)
    head = make_head(ids, np.random.default_rng(16).normal(scale=0.05, size=len(ids)), 0.1)
    for engine in (fresh, cached):
        engine.readout = Readout(engine.readout.matrix, head)
    yield fresh, cached, head
    fresh.close()
    cached.close()


@pytest.mark.model
def test_with_the_head_answers_are_bit_identical_fresh_cached_alone_and_batched(engines):
    fresh, cached, head = engines
    reference = {}
    for state in STATES:
        job = make_job(fresh, state, QUESTIONS)
        fresh.run([job])
        reference.update({(state, q): m for q, m in zip(QUESTIONS, job.margins)})
    rng = random.Random(16)
    for _ in range(6):
        batch = [(rng.choice(STATES), rng.sample(QUESTIONS, rng.randint(1, 3))) for _ in range(rng.randint(1, 3))]
        jobs = [make_job(cached, s, qs) for s, qs in batch]
        cached.run(jobs)
        for (s, qs), job in zip(batch, jobs):
            assert job.margins == [reference[(s, q)] for q in qs]
    assert cached.cache.stats().hits >= 3


@pytest.mark.model
def test_the_head_logit_is_the_head_applied_to_the_captured_columns(engines):
    fresh, _, head = engines
    fresh.readout.capture = head.ids
    try:
        job = make_job(fresh, STATES[0], QUESTIONS[:2])
        fresh.run([job])
    finally:
        fresh.readout.capture = None
    assert [head.logit_of(job.features[s]) for s in range(2)] == job.margins
    plain = make_job(fresh, STATES[0], QUESTIONS[:2])
    head_readout, fresh.readout = fresh.readout, Readout(fresh.readout.matrix)
    try:
        fresh.run([plain])
    finally:
        fresh.readout = head_readout
    assert all(math.isfinite(m) for m in plain.margins) and plain.margins != job.margins

