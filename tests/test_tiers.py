"""The tiers' guard (tests/tiers.py): this test carries no marker, so it runs in the fast tier, and
loading the model or starting a fleet here must fail at once with the marker that is missing."""
from __future__ import annotations

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
        Engine.from_settings(Path("any.gguf"), default_settings(), threads=1)
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
