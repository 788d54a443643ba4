"""The tiers' guard (tests/tiers.py): this test carries no marker, so it runs in the fast tier, and
loading the model or starting a fleet here must fail at once with the marker that is missing; and
what each tier reports of the one-off work kept in the cache dir."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from gateway.tokenizer import Tokenizer
from jevfleet.harness.fleet import start_fleet
from shared.config import default_settings, load_settings
from shared.profiles import load_profile
from tests import tiers
from worker.engine import Engine


def test_an_unmarked_test_cannot_load_the_model_in_process():
    profile = load_profile("gemma-3-270m")
    with pytest.raises(tiers.TierError, match=r"test_tiers\.py::.* loads the model: mark it @pytest.mark.model"):
        # snapshot_tokens given: the budget's default reads the file's header (ggml, no model) first
        Engine.from_settings(Path("any.gguf"), default_settings(), threads=1, snapshot_tokens=0)
    with pytest.raises(tiers.TierError, match="mark it @pytest.mark.model"):
        Tokenizer(Path("any.gguf"), profile, threads=1)


def test_an_unmarked_test_sends_its_subprocesses_to_a_model_that_does_not_exist():
    assert os.environ["JEV_MODEL"] == tiers.NO_MODEL
    assert load_settings().model == tiers.NO_MODEL and not Path(tiers.NO_MODEL).exists()


def test_an_unmarked_test_cannot_start_a_fleet(tmp_path):
    with pytest.raises(RuntimeError, match="starts a fleet: mark it @pytest.mark.fleet"):
        start_fleet(tmp_path)


@pytest.mark.parametrize("code, said", [(0, "passed"), (1, "FAILED (pytest exit 1)"), (5, "NOTHING COLLECTED")])
def test_a_tier_that_selects_nothing_is_not_a_pass(code, said):
    assert tiers.outcome(code) == said


def test_one_off_work_is_told_apart_made_now_or_found_cached(tmp_path):
    (tmp_path / "calibration").mkdir()
    (tmp_path / "shapes").mkdir()
    (tmp_path / "calibration" / "old.json").write_text(json.dumps({"scale": 1, "seconds": 44.0}))
    (tmp_path / "calibration" / "old.lock").write_text("")  # not a record
    before = tiers.one_off_records(tmp_path)
    (tmp_path / "calibration" / "new.json").write_text(json.dumps({"scale": 1, "seconds": 106.5}))
    (tmp_path / "shapes" / "new.json").write_text(json.dumps({"differed": False, "seconds": 3.5}))
    (tmp_path / "shapes" / "older-kind.json").write_text(json.dumps({"differed": False}))  # made before "seconds"
    (tmp_path / "exact").mkdir()
    (tmp_path / "exact" / "new.json").write_text(json.dumps({"gap": 0.01, "scale": 1.0, "seconds": 12.0}))
    line = tiers.one_off_line(before, tiers.one_off_records(tmp_path))
    assert line == ("one-off work: 4 records made now (1 calibration, 2 shapes, 1 exact; 122.0 s cold), "
                    "1 found cached (warm; they cost 44.0 s when made)")


@pytest.mark.parametrize("code, expected", [(0, 0), (1, 1), (tiers.NOTHING_COLLECTED, 1)])
def test_the_run_fails_when_a_tier_fails_and_passes_otherwise(monkeypatch, tmp_path, capsys, code, expected):
    from types import SimpleNamespace

    monkeypatch.setenv("JEV_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(tiers.subprocess, "run", lambda *args, **kwargs: SimpleNamespace(returncode=code))
    assert tiers.main([]) == expected
    lines = capsys.readouterr().out.splitlines()
    assert lines[-1] == "0 passed, 0 failed, 0 skipped"
    assert sum("one-off work: 0 records made now" in line for line in lines) == len(tiers.TIERS)
