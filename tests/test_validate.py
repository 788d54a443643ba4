"""loadtest.validate: every answer a load run gets is checked; malformed ones are caught."""
from __future__ import annotations

import dataclasses
import math

import pytest

from loadtest.validate import (InvalidAnswer, check_answers, check_decision, check_llama_server_completion,
                               check_llama_server_completions,
                               check_openai_completion, yes_probability)
from shared.profiles import load_profile

# identity calibration, whatever the shipped profile says: P(yes) is the plain ratio
PROFILE = dataclasses.replace(load_profile("gemma-3-270m"), scale=1.0, bias=0.0)


def decision(**answer) -> dict:
    return {"model": "gemma-3-270m", "answers": {"q": {"type": "noul", "noul": 0.8, **answer}},
            "usage": {"input_tokens": 90, "output_tokens": 0}}


def test_a_good_decision_passes_and_bad_ones_do_not():
    assert check_decision(decision(), "q") == 0.8
    bad = [decision(noul=1.2), decision(noul=-0.1), decision(noul="0.5"), decision(noul=True),
           decision(type="choice"), {"answers": {}}, None,
           {**decision(), "usage": {"input_tokens": 9.0, "output_tokens": 0}},
           {**decision(), "answers": {"q": {"type": "noul", "noul": 0.5}, "r": {"type": "noul", "noul": 0.5}}}]
    for body in bad:
        with pytest.raises(InvalidAnswer):
            check_decision(body, "q")


def test_yes_probability_from_top_logprobs():
    top = {" Yes": math.log(0.6), " yes": math.log(0.1), " No": math.log(0.2), " the": math.log(0.05)}
    assert yes_probability(PROFILE, top) == pytest.approx(0.7 / 0.9)
    only_no = {" No": math.log(0.9), " the": math.log(0.01)}  # yes bounded by the smallest listed
    assert yes_probability(PROFILE, only_no) == pytest.approx(0.01 / 0.91)
    for top in ({}, {" the": -0.1}, {" Yes": 0.5}, {" Yes": float("nan")}):
        with pytest.raises(InvalidAnswer):
            yes_probability(PROFILE, top)


def test_a_random_weight_zoo_file_may_have_neither_answer_on_top_but_nothing_else_is_let_through():
    from loadtest.validate import RANDOM_WEIGHTS

    zoo = dataclasses.replace(PROFILE, description=f"llama-3.2-1b ({RANDOM_WEIGHTS}) (llama), derived")
    assert math.isnan(yes_probability(zoo, {" the": -0.1}))
    for top in ({}, {" Yes": 0.5}):
        with pytest.raises(InvalidAnswer):
            yes_probability(zoo, top)


def test_baseline_shapes():
    openai = {"choices": [{"logprobs": {"top_logprobs": [{" Yes": -0.1, " No": -2.5}]}}]}
    assert 0.5 < check_openai_completion(openai, PROFILE) <= 1
    server = {"completion_probabilities": [{"top_logprobs": [{"token": " No", "logprob": -0.05},
                                                              {"token": " Yes", "logprob": -3.0}]}]}
    assert 0 <= check_llama_server_completion(server, PROFILE) < 0.5
    for body in ({"choices": []}, {"choices": [{"logprobs": None}]}, {}):
        with pytest.raises(InvalidAnswer):
            check_openai_completion(body, PROFILE)
    with pytest.raises(InvalidAnswer):
        check_llama_server_completion({"content": "Yes"}, PROFILE)


def test_many_answers_and_a_choice_are_checked_and_counted():
    nouls = {"model": "m", "answers": {"a": {"type": "noul", "noul": 0.1}, "b": {"type": "noul", "noul": 0.9}},
             "usage": {"input_tokens": 90, "output_tokens": 0}}
    assert check_answers(nouls, ("a", "b"), "noul") == 2
    choice = {"model": "m", "usage": {"input_tokens": 90, "output_tokens": 0},
              "answers": {"q": {"type": "choice", "choice": "2 days", "confidence": 0.6,
                                "probabilities": {"1 day": 0.4, "2 days": 0.6}}}}
    assert check_answers(choice, ("q",), "choice") == 1
    wrong_choice = {**choice, "answers": {"q": {**choice["answers"]["q"], "choice": "9 days"}}}
    for body, ids, kind in ((nouls, ("a",), "noul"), (nouls, ("a", "b"), "choice"), (wrong_choice, ("q",), "choice"),
                            ({**nouls, "answers": {"a": {"type": "noul", "noul": 2}, "b": {"type": "noul", "noul": 0}}},
                             ("a", "b"), "noul")):
        with pytest.raises(InvalidAnswer):
            check_answers(body, ids, kind)


def test_llama_server_answers_to_many_prompts_come_as_one_array():
    one = {"completion_probabilities": [{"top_logprobs": [{"token": " Yes", "logprob": -0.1}]}]}
    assert check_llama_server_completions([one, one, one], PROFILE, 3, 3) == 3
    assert check_llama_server_completions(one, PROFILE, 1, 1) == 1
    for body in ([one, one], one, [one, {"content": "Yes"}, one]):
        with pytest.raises(InvalidAnswer):
            check_llama_server_completions(body, PROFILE, 3, 3)
