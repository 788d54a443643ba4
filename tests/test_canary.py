"""worker/canary.py on the real default model: the canary passes on a sound engine, leaves no
snapshot behind, and refuses a readout that does not match llama.cpp's logits, a batch that
moves a deterministic answer, and margins that drift from llama.cpp's exact reading."""
from __future__ import annotations

import json

import numpy as np
import pytest

from jevfleet.harness.engine import default_model, new_engine
from worker import canary
from worker.canary import (EXACT_TOLERANCE, LAYOUTS, TOLERANCE, CanaryError, check_exact, layout_mates, run_canary,
                           shape_record)
from worker.engine import Engine
from worker.job import Job
from worker.exact import ExactReader

pytestmark = pytest.mark.model


@pytest.fixture(scope="module")
def engine() -> Engine:
    engine = new_engine(ctx=1024)  # build_engine runs the canary once already
    yield engine
    engine.close()


def test_the_canary_passes_and_leaves_the_cache_as_it_was(engine):
    profile, _ = default_model()
    held = engine.status.snapshot_keys
    report = run_canary(engine, profile)
    assert report.output_type == "Q8_0" and report.max_logit_gap < TOLERANCE
    assert len(report.decode_calls) == 3 and all(calls >= 1 for calls in report.decode_calls)
    assert engine.status.snapshot_keys == held and not engine.tap.full_logits and engine.readout.capture is None


def test_the_arithmetic_digest_is_the_same_at_every_start_and_moves_with_the_last_bit_of_a_logit(engine):
    """What a worker states as its arithmetic (shared/serving.py): the bits of the probe's answer,
    equal run after run on one build, and changed by one last bit of one logit of the probe's row
    (far below what its margin shows after the readout's Q8_0 round trip)."""
    profile, _ = default_model()
    first, second = run_canary(engine, profile), run_canary(engine, profile)
    assert first.arithmetic == second.arithmetic == engine.arithmetic and len(first.arithmetic) == 16
    job = Job(prefix=[1], suffixes=[[2]], yes_ids=[3], no_ids=[4])
    job.margins, job.features = [0.25], {0: np.array([1.5, -2.0])}
    job.reference = {0: (np.array([1.5, -2.0]), 3.0)}
    same = canary.arithmetic_digest(job)
    job.reference[0] = (np.array([1.5, np.nextafter(-2.0, 0)]), 3.0)
    assert canary.arithmetic_digest(job) != same


def test_a_readout_that_is_not_llama_cpps_is_refused(engine, monkeypatch):
    """The answer columns computed from rows of another matrix (each scaled by 2 %)."""
    profile, _ = default_model()
    rows = engine.readout.matrix.rows
    monkeypatch.setattr(engine.readout.matrix, "rows", lambda ids: rows(ids) * 1.02)
    with pytest.raises(CanaryError, match="differ from llama.cpp's own"):
        run_canary(engine, profile)


def test_an_answer_that_moves_among_batch_mates_is_refused(engine, monkeypatch):
    """A stand-in for a CPU whose kernels round by batch shape: the last bit of every margin
    in a batch of more than one request moves."""
    profile, _ = default_model()
    real = engine.run

    def moved(jobs, *, warm=False):
        read = real(jobs, warm=warm)
        if len(jobs) > 1:
            for job in jobs:
                job.margins = [float(np.nextafter(m, np.inf)) for m in job.margins]
        return read

    monkeypatch.setattr(engine, "run", moved)
    with pytest.raises(CanaryError, match="not deterministic here"):
        run_canary(engine, profile)


def test_more_layouts_are_measured_once_per_model_and_cpu_then_read_from_the_record(engine, tmp_path):
    profile, _ = default_model()
    record = shape_record(tmp_path, "ab" * 32)
    assert record.parent == tmp_path / "shapes" and record.name.startswith("abababababababab-")
    assert shape_record(tmp_path, "cd" * 32) != record  # another model file, another record
    reading = tmp_path / "pieces.py"  # a stand-in for one of our reading modules, changed
    reading.write_text("RULE = 1\n")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(canary, "READING_CODE", (*canary.READING_CODE, str(reading)))
        before_change = shape_record(tmp_path, "ab" * 32)
        reading.write_text("RULE = 2\n")
        assert shape_record(tmp_path, "ab" * 32) != before_change  # other reading code: measured again
    first = run_canary(engine, profile, record)
    assert first.layouts_measured == LAYOUTS and json.loads(record.read_text())["differed"] is False
    before = engine.decode_calls
    again = run_canary(engine, profile, record)
    assert again.layouts_measured == 0 and engine.decode_calls - before == sum(again.decode_calls)


def test_a_record_of_a_margin_that_moved_refuses_deterministic_mode_without_measuring(engine, tmp_path):
    profile, _ = default_model()
    record = tmp_path / "moved.json"
    record.write_text(json.dumps({"differed": True}))
    with pytest.raises(CanaryError, match="not deterministic here"):
        run_canary(engine, profile, record)


def test_the_layouts_put_the_probe_among_other_mates_each_time():
    layouts = [layout_mates(k) for k in range(LAYOUTS)]
    assert len({repr(mates) for mates in layouts}) == LAYOUTS
    assert {len(mates) for mates in layouts} == {1, 2, 3}


def test_the_served_margins_are_llama_cpps_exact_reading_within_the_tolerance(engine):
    """Within the spread of the exact reading itself (worker/canary.py's EXACT_TOLERANCE)."""
    profile, _ = default_model()
    held = engine.status.snapshot_keys
    report = check_exact(engine, profile)
    assert report.measured and report.share <= EXACT_TOLERANCE
    assert engine.status.snapshot_keys == held and engine.readout.capture is None


def test_margins_that_drift_from_the_exact_reading_are_refused(engine, monkeypatch):
    """A stand-in for a build or model file that reads prompts differently: the exact reading
    moved by one nat."""
    profile, _ = default_model()
    margin = ExactReader.margin
    monkeypatch.setattr(ExactReader, "margin", lambda self, tokens, **kw: margin(self, tokens, **kw) + 1.0)
    with pytest.raises(CanaryError, match="exact reading"):
        check_exact(engine, profile)
    assert check_exact(engine, profile, refuse=False).share > EXACT_TOLERANCE


def test_the_exact_figures_are_measured_once_then_read_until_something_they_depend_on_changes(engine, tmp_path,
                                                                                             monkeypatch):
    profile, _ = default_model()
    first = check_exact(engine, profile, cache_dir=tmp_path, model_sha256="ab" * 32)
    (record,) = (tmp_path / "exact").iterdir()
    assert first.measured and record.name.startswith("abababababababab-")
    assert json.loads(record.read_text())["seconds"] > 0  # what it cost, for make test's one-off line

    def unread(self, tokens, **kw):
        raise AssertionError("the exact reading ran again")

    monkeypatch.setattr(ExactReader, "margin", unread)
    again = check_exact(engine, profile, cache_dir=tmp_path, model_sha256="ab" * 32)
    assert (again.measured, again.share) == (False, first.share)
    with pytest.raises(AssertionError, match="ran again"):  # another model file: measured, not read
        check_exact(engine, profile, cache_dir=tmp_path, model_sha256="cd" * 32)
    figures = json.loads(record.read_text())
    record.write_text(json.dumps({**figures, "gap": figures["scale"]}))  # a record of margins that drifted
    with pytest.raises(CanaryError, match="exact reading"):
        check_exact(engine, profile, cache_dir=tmp_path, model_sha256="ab" * 32)
