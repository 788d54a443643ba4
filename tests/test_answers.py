"""From margins to answers: choice normalisation, pool-adjacent-violators, score distributions."""
from __future__ import annotations

import dataclasses
import json
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.answers import (confidence, level_distribution, log_sigmoid, normalise_yes, pool_adjacent_violators,
                             sigmoid)
from gateway.pipeline import Tokens, prepare, respond
from shared.profiles import load_profile

# Calibration pinned to identity (whatever the shipped profile says): margin = logit of P(yes)
PROFILE = dataclasses.replace(load_profile("gemma-3-270m"), scale=1.0, bias=0.0)


def logit(p: float) -> float:
    return math.log(p / (1 - p))


def test_sigmoid_and_log_sigmoid_are_stable_at_the_extremes():
    assert sigmoid(800) == 1.0 and sigmoid(-800) == 0.0
    assert log_sigmoid(-800) == pytest.approx(-800) and log_sigmoid(800) == 0.0
    assert log_sigmoid(0.3) == pytest.approx(math.log(sigmoid(0.3)))


def test_choice_probabilities_are_p_yes_normalised_to_sum_to_1():
    p = [0.44, 0.06]  # P(yes) per option; normalised: 0.88 and 0.12
    probabilities = normalise_yes([logit(x) for x in p])
    assert probabilities == pytest.approx([0.88, 0.12])
    assert confidence(probabilities) == pytest.approx(0.76)  # the spec's example: (2·0.88 − 1)/(2 − 1)


def test_choice_normalisation_survives_underflow():
    probabilities = normalise_yes([-900.0, -800.0, -800.0 - math.log(3)])
    assert all(math.isfinite(x) for x in probabilities) and sum(probabilities) == pytest.approx(1)
    assert probabilities[1] == pytest.approx(0.75)


def test_confidence_is_0_for_uniform_and_1_for_certain():
    assert confidence([0.25] * 4) == pytest.approx(0)
    assert confidence([0, 1, 0]) == 1


@pytest.mark.parametrize("values, fitted", [
    ([0.9, 0.5, 0.1], [0.9, 0.5, 0.1]),  # already non-increasing: unchanged
    ([0.2, 0.6], [0.4, 0.4]),
    ([0.9, 0.3, 0.5, 0.1], [0.9, 0.4, 0.4, 0.1]),
    ([0.1, 0.2, 0.9], [0.4, 0.4, 0.4]),
    ([0.5, 0.3, 0.4, 0.8], [0.5, 0.5, 0.5, 0.5]),
    ([], []),
])
def test_pool_adjacent_violators_examples(values, fitted):
    assert pool_adjacent_violators(values) == pytest.approx(fitted)


@given(st.lists(st.floats(0, 1), max_size=12))
def test_pool_adjacent_violators_is_non_increasing_and_keeps_the_sum(values):
    fitted = pool_adjacent_violators(values)
    assert len(fitted) == len(values)
    assert all(a >= b - 1e-12 for a, b in zip(fitted, fitted[1:]))
    assert sum(fitted) == pytest.approx(sum(values), abs=1e-9)


def test_score_distribution_of_the_spec_example():
    # P(level ≥ 1) = 0.95, P(level ≥ 2) = 0.10 → 0.05, 0.85, 0.10; score 1.05; confidence 0.775
    probabilities = level_distribution([0.95, 0.10])
    assert probabilities == pytest.approx([0.05, 0.85, 0.10])
    assert sum(i * p for i, p in enumerate(probabilities)) == pytest.approx(1.05)
    assert confidence(probabilities) == pytest.approx(0.775)


@given(st.lists(st.floats(0, 1), min_size=1, max_size=9))
def test_score_distribution_is_a_distribution_whatever_the_thresholds_say(survival):
    probabilities = level_distribution(survival)
    assert len(probabilities) == len(survival) + 1
    assert all(p >= 0 for p in probabilities) and sum(probabilities) == pytest.approx(1)


REQUEST = {"model": "jev-latest", "state": "I was charged twice for the same order.", "questions": {
    "billing": {"type": "noul", "instructions": "Is this a billing problem?"},
    "team": {"type": "choice", "instructions": "Which team?", "criteria": {"billing": "payments", " Tech 🚀 ": None}},
    "anger": {"type": "score", "criteria": ["calm", {"level": "annoyed", "n": 1}, ["furious", 2]]},
    "later": {"type": "noul"},
}}


def answer(margins: list[float]) -> dict:
    prepared = prepare(REQUEST, PROFILE)
    tokens = Tokens(prefix=[1] * 100, suffixes=[[2] * 5] * len(prepared.rendered.suffixes))
    return json.loads(respond(PROFILE, prepared, tokens, margins).model_dump_json())


def test_assembled_answers_in_request_order_with_their_types():
    body = answer([logit(0.94), logit(0.44), logit(0.06), logit(0.95), logit(0.10), 0.0])
    assert body["model"] == "gemma-3-270m"
    assert list(body["answers"]) == ["billing", "team", "anger", "later"]
    assert [a["type"] for a in body["answers"].values()] == ["noul", "choice", "score", "noul"]
    assert body["answers"]["billing"]["noul"] == pytest.approx(0.94)
    team = body["answers"]["team"]
    assert team["choice"] == "billing" and list(team["probabilities"]) == ["billing", " Tech 🚀 "]
    assert team["probabilities"]["billing"] == pytest.approx(0.88) and team["confidence"] == pytest.approx(0.76)
    anger = body["answers"]["anger"]
    assert anger["legend"] == {"0": "calm", "1": '{"level":"annoyed","n":1}', "2": '["furious",2]'}
    assert list(anger["probabilities"]) == ["0", "1", "2"]
    assert anger["score"] == pytest.approx(1.05) and anger["confidence"] == pytest.approx(0.775)
    assert body["answers"]["later"]["noul"] == 0.5


def test_usage_counts_the_state_once_in_integers():
    body = answer([0.0] * 6)
    assert body["usage"] == {"input_tokens": 100 + 6 * 5, "output_tokens": 0}


def test_a_choice_tie_goes_to_the_first_option():
    assert answer([0.0] * 6)["answers"]["team"]["choice"] == "billing"


def test_non_finite_margins_are_a_server_error_not_an_answer():
    with pytest.raises(ValueError):
        answer([float("nan")] + [0.0] * 5)
    with pytest.raises(ValueError):
        answer([0.0] * 5)
