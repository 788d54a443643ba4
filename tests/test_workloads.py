"""loadtest.workloads and loadtest.protocols: W4 asks 20 questions a request on the W2 states
(a 255-option choice one request in 20), and every target is sent the same prompts."""
from __future__ import annotations

from gateway.prompts import render
from gateway.wire import DecisionRequest
from loadtest import workloads
from loadtest.protocols import PROTOCOLS
from loadtest.workloads import CHOICE_OPTIONS, W4_CHOICE_EVERY, W4_QUESTIONS, decision_body, prompt_texts
from shared.profiles import load_profile

PROFILE = load_profile("gemma-3-270m")


def test_w4_is_built_from_the_w2_states_and_questions():
    w2, w4 = workloads.load("W2"), workloads.load("W4")
    assert "W4" in workloads.names() and len(w4) == len(w2)
    choices = [k for k, item in enumerate(w4) if item.options]
    assert choices == list(range(W4_CHOICE_EVERY - 1, len(w4), W4_CHOICE_EVERY))
    w2_questions = {item.questions[0] for item in w2}
    for k, item in enumerate(w4):
        assert item.state == w2[k].state
        if item.options:
            assert len(item.options) == len(set(item.options)) == CHOICE_OPTIONS == 255
            assert item.question_ids == ("q",)
        else:
            assert len(item.questions) == len(set(item.questions)) == W4_QUESTIONS
            assert set(item.questions) <= w2_questions and item.questions[0] == w2[k].questions[0]
            assert len(set(item.question_ids)) == W4_QUESTIONS


def test_the_gateway_body_is_valid_and_the_baselines_get_its_prompts():
    for item in (workloads.load("W1")[0], workloads.load("W4")[0], workloads.load("W4")[W4_CHOICE_EVERY - 1]):
        body = decision_body(item)
        request = DecisionRequest.model_validate(body)  # what the gateway accepts
        assert list(request.questions) == list(item.question_ids)
        rendered = render(PROFILE, request)
        prompts = prompt_texts(PROFILE, item)
        assert prompts == tuple(rendered.prefix + s for s in rendered.suffixes)
        assert len(prompts) == (len(item.options) or len(item.questions))
        sent = PROTOCOLS["llama-server"].body(PROFILE, item)["prompt"]
        assert sent == (prompts[0] if len(prompts) == 1 else list(prompts))


def test_answers_are_counted_per_question():
    item = workloads.load("W4")[0]
    answers = {qid: {"type": "noul", "noul": 0.5} for qid in item.question_ids}
    body = {"model": "m", "answers": answers, "usage": {"input_tokens": 900, "output_tokens": 0}}
    assert PROTOCOLS["jevfleet"].check(body, PROFILE, item) == W4_QUESTIONS
    result = {"completion_probabilities": [{"top_logprobs": [{"token": " Yes", "logprob": -0.1}]}]}
    assert PROTOCOLS["llama-server"].check([result] * W4_QUESTIONS, PROFILE, item) == W4_QUESTIONS
    choice = workloads.load("W4")[W4_CHOICE_EVERY - 1]
    assert PROTOCOLS["llama-server"].check([result] * CHOICE_OPTIONS, PROFILE, choice) == 1
