"""The model `jevfleet serve` serves when none is named is a real one: a fleet started with the
shipped default (Qwen2.5-Coder 1.5B Instruct, its 22 chunk packages joined into the cache dir, its
shipped calibration) answers a stated fact yes and its contradiction no. Not a quality claim (that
is docs/quality.md's card on the held-back split): a check that the default is not noise, which the
small model every other test runs is (it answers at chance)."""
from __future__ import annotations

import pytest

from client.net import post_json
from jevfleet.harness.fleet import CHECKED, start_fleet
from shared.config import Settings, env_var

DEFAULT = Settings.model_fields["default_profile"].default
STATE = "Invoice 4471 was paid in full by bank transfer on 3 March. The customer owes nothing."
FACT = "Was invoice 4471 paid by bank transfer?"
CONTRADICTION = "Was invoice 4471 paid in cash?"  # stated otherwise (negations are its weak kind: docs/quality.md)
READY_TIMEOUT_S = 600  # a cold cache joins 1.1 GB and the canary reads its layouts on 1.5B weights


@pytest.mark.fleet
def test_the_default_model_answers_a_stated_fact_yes_and_its_contradiction_no(tmp_path):
    fleet = start_fleet(tmp_path / "run", workers=1, extra=CHECKED, env={env_var("default_profile"): DEFAULT},
                        timeout=READY_TIMEOUT_S)
    try:
        status, _, body = post_json(fleet.url + "/v1/systemone", {
            "model": "jev-latest", "state": STATE,
            "questions": {"fact": {"type": "noul", "instructions": FACT},
                          "contradiction": {"type": "noul", "instructions": CONTRADICTION}}})
        assert status == 200, body
        assert body["model"] == DEFAULT
        answers = body["answers"]
        assert answers["fact"]["noul"] > 0.8, answers
        assert answers["contradiction"]["noul"] < 0.2, answers
    finally:
        assert fleet.stop() == 0, fleet.logs()
