"""The semantic checks in the short form ({"loc", "msg", "type"}), one test per row of
the checks table in docs/wire.md, through the same pipeline the gateway runs (no server)."""
from __future__ import annotations

import json

import pytest

from gateway.checks import check_context
from gateway.errors import ApiError
from gateway.pipeline import prepare
from gateway.prompts import Rendered
from shared.profiles import load_profile

PROFILE = load_profile("gemma-3-270m")
VALID = {"model": "jev-latest", "state": "I was charged twice for the same order.",
         "questions": {"billing": {"type": "noul", "instructions": "Is this a billing problem?"}}}


def refused(body) -> dict:
    """The single short-form error a body gets."""
    with pytest.raises(ApiError) as caught:
        prepare(body, PROFILE)
    assert caught.value.status == 422
    (err,) = json.loads(caught.value.json())["detail"]
    assert list(err) == ["loc", "msg", "type"]  # short form: no input, no ctx
    return err


def with_question(question, qid: str = "q") -> dict:
    return {**VALID, "questions": {qid: question}}


@pytest.mark.parametrize("name", ["gpt-4", "jev", "Jev-latest", " jev-latest", "gemma-3-270m "])
def test_unknown_model_is_refused_naming_it_with_repr(name):
    assert refused({**VALID, "model": name}) == {
        "loc": ["body", "model"], "type": "value_error",
        "msg": f"Unknown model {name!r}: this server answers as 'gemma-3-270m' and accepts any 'jev-*' alias"}


@pytest.mark.parametrize("name", ["gemma-3-270m", "jev-latest", "jev-1.2.3", "jev-"])
def test_served_model_and_any_jev_alias_are_accepted(name):
    prepare({**VALID, "model": name}, PROFILE)


@pytest.mark.parametrize("state", ["", "   ", "\n\t ", {}, []])
def test_blank_state_is_refused(state):
    assert refused({**VALID, "state": state}) == {
        "loc": ["body"], "msg": "Value error, State must not be empty", "type": "value_error"}


def test_state_over_256_kb_is_refused_and_256_kb_is_not():
    prepare({**VALID, "state": "é" * 128_000}, PROFILE)  # 256,000 bytes of UTF-8
    assert refused({**VALID, "state": "é" * 128_000 + "x"}) == {
        "loc": ["body"], "msg": "Value error, State exceeds 256 KB; no silent truncation", "type": "value_error"}


def test_state_size_counts_the_rendered_json():
    # 64,000 one-element lists render as far more than 256 KB of indented JSON
    assert refused({**VALID, "state": [[1]] * 64_000})["msg"] == "Value error, State exceeds 256 KB; no silent truncation"


@pytest.mark.parametrize("value, shown", [(float("nan"), "nan"), (float("inf"), "inf"), (float("-inf"), "-inf")])
def test_nan_or_infinity_built_in_python_is_refused_like_a_parsed_one(value, shown):
    """body.py refuses a parsed NaN first; a body built in Python (decide) gets the same error."""
    for body in ({**VALID, "state": {"x": [1, value]}}, with_question({"type": "noul", "instructions": {"x": value}})):
        assert refused(body) == {"loc": ["body"], "type": "value_error",
                                 "msg": f"Out of range float values are not JSON compliant: {shown}"}


def surrogate_error(text: str) -> str:
    with pytest.raises(UnicodeEncodeError) as python:
        text.encode("utf-8")
    return f"Value error, {python.value}"


@pytest.mark.parametrize("body, text", [
    ({**VALID, "state": "abc \ud800 def"}, "abc \ud800 def"),
    ({**VALID, "model": "jev-\udfff"}, "jev-\udfff"),
    (with_question({"type": "noul", "instructions": "Is it \ud800?"}), "Is it \ud800?"),
    (with_question({"type": "noul", "criteria": {"true": "\ud800"}}), "\ud800"),
    (with_question({"type": "choice", "criteria": {"a\ud800": None, "b": None}}), "a\ud800"),
    (with_question({"type": "score", "criteria": ["low", "hi\udc00"]}), "hi\udc00"),
])
def test_a_lone_surrogate_in_any_text_the_model_reads_is_refused_with_pythons_error(body, text):
    msg = surrogate_error(text)
    assert msg.startswith("Value error, 'utf-8' codec can't encode character '\\u") and "surrogates not allowed" in msg
    assert refused(body) == {"loc": ["body"], "msg": msg, "type": "value_error"}


def test_a_lone_surrogate_in_a_question_id_is_accepted():
    prepared = prepare(with_question({"type": "noul"}, "q\ud800"), PROFILE)
    assert list(prepared.request.questions) == ["q\ud800"]


def test_the_checks_run_in_the_order_state_model_questions():
    bad_state, bad_model, bad_id = {"state": ""}, {"model": "gpt-4"}, {"questions": {" ": {"type": "noul"}}}
    assert refused({**VALID, **bad_state, **bad_model, **bad_id})["msg"] == "Value error, State must not be empty"
    assert refused({**VALID, **bad_model, **bad_id})["loc"] == ["body", "model"]


@pytest.mark.parametrize("level", ["", " ", "\n\t"])
def test_a_score_level_needs_at_least_one_character(level):
    assert refused(with_question({"type": "score", "criteria": ["low", level, "high"]})) == {
        "loc": ["body", "questions", "q", "score", "criteria", 1], "msg": "String should have at least 1 character",
        "type": "string_too_short"}


@pytest.mark.parametrize("qid", ["", " ", "\t", "x" * 129, " " + "x" * 129])
def test_question_id_blank_or_over_128_characters_is_refused(qid):
    assert refused(with_question({"type": "noul"}, qid)) == {
        "loc": ["body"], "msg": "Value error, Question IDs must have 1–128 nonblank characters", "type": "value_error"}


@pytest.mark.parametrize("qid", ["x", "x" * 128, "  " + "x" * 128 + "  ", "ü" * 128])
def test_question_ids_of_1_to_128_characters_after_stripping_are_accepted(qid):
    prepare(with_question({"type": "noul"}, qid), PROFILE)


def test_over_1024_questions_is_too_long_and_1024_is_fine():
    prepare({**VALID, "questions": {f"q{i}": {"type": "noul"} for i in range(1024)}}, PROFILE)
    assert refused({**VALID, "questions": {f"q{i}": {"type": "noul"} for i in range(1025)}}) == {
        "loc": ["body", "questions"], "msg": "Dictionary should have at most 1024 items after validation, not 1025",
        "type": "too_long"}


LONG = "x" * 8001


@pytest.mark.parametrize("question, loc", [
    ({"type": "noul", "instructions": LONG}, ["instructions"]),
    ({"type": "noul", "criteria": {"true": LONG}}, ["criteria", "true"]),
    ({"type": "noul", "criteria": {"false": LONG}}, ["criteria", "false"]),
    ({"type": "choice", "instructions": LONG, "criteria": {"a": None, "b": None}}, ["instructions"]),
    ({"type": "choice", "criteria": {"a": None, "b": LONG}}, ["criteria", "b"]),
    ({"type": "score", "criteria": ["low", LONG]}, ["criteria", 1]),
    ({"type": "score", "criteria": ["low", {"text": "x" * 7990}]}, ["criteria", 1]),  # rendered JSON counts
])
def test_text_over_8000_characters_is_refused_at_its_loc(question, loc):
    assert refused(with_question(question)) == {
        "loc": ["body", "questions", "q", question["type"], *loc],
        "msg": "String should have at most 8000 characters", "type": "string_too_long"}


def test_text_of_8000_characters_after_stripping_is_accepted():
    prepare(with_question({"type": "noul", "instructions": "  " + "x" * 8000 + "\n"}), PROFILE)


@pytest.mark.parametrize("levels", [["calm", "calm"], ["calm", " calm "], ["a", "b", "a"], [{"x": 1}, {"x": 1}]])
def test_duplicate_score_levels_are_refused(levels):
    assert refused(with_question({"type": "score", "criteria": levels}, "s")) == {
        "loc": ["body", "questions", "s", "score"], "msg": "Value error, Levels must have distinct descriptions",
        "type": "value_error"}


def test_schema_errors_come_before_the_checks():
    with pytest.raises(ApiError) as caught:
        prepare({"model": "gpt-4", "state": "", "questions": {}}, PROFILE)
    assert [e["type"] for e in json.loads(caught.value.json())["detail"]] == ["too_short"]


def test_prompt_longer_than_the_context_is_refused_naming_the_question():
    rendered = Rendered(prefix="p", suffixes=["a", "b", "c"], spans=[("short", 0, 1), ("long one", 1, 3)])
    check_context(rendered, [1] * 8000, [[1] * 192, [1] * 10, [1] * 10], ctx=8192)
    with pytest.raises(ApiError) as caught:
        check_context(rendered, [1] * 8000, [[1] * 10, [1] * 10, [1] * 193], ctx=8192)
    assert json.loads(caught.value.json()) == {"detail": [{
        "loc": ["body"], "msg": "Question long one: 8193 tokens exceeds the context limit 8192 (--ctx); no truncation",
        "type": "value_error"}]}
