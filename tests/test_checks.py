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


@pytest.mark.parametrize("name", ["gpt-4", "jev", "Jev-latest", " jev-latest", "gemma-3-270m ",
                                  "jevos-v4-q8_0"])  # the reference's own name pins its weights: refused
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
                                 "msg": f"Value error, Out of range float values are not JSON compliant: {shown}"}


def surrogate_error(text: str) -> str:
    with pytest.raises(UnicodeEncodeError) as python:
        text.encode("utf-8")
    return f"Value error, {python.value}"


@pytest.mark.parametrize("state, position", [
    ("abc \ud800 def", 5), ("a\nb\ud800", 5), ('"\ud800', 3), ({"k": ["ok", "\udfff"]}, 14), (["\ud800"], 2)])
def test_a_lone_surrogate_in_the_state_is_placed_in_the_state_as_json(state, position):
    """The reference encodes json.dumps(state, ensure_ascii=False): the opening quote and every
    escape count, so "abc \\ud800" is at 5 where the string itself has it at 4."""
    msg = surrogate_error(json.dumps(state, ensure_ascii=False))
    assert f"in position {position}: surrogates not allowed" in msg
    assert refused({**VALID, "state": state}) == {"loc": ["body"], "type": "value_error", "msg": msg}


NOT_UNICODE = "Input should be a valid string, unable to parse raw data as a unicode string"


@pytest.mark.parametrize("question, loc", [
    ({"type": "noul", "instructions": "Is it \ud800?"}, ["boolean", "instructions"]),
    ({"type": "noul", "instructions": {"k": ["\ud800"]}}, ["boolean", "instructions"]),
    ({"type": "noul", "criteria": {"true": "\ud800"}}, ["boolean", "true_description"]),
    ({"type": "noul", "criteria": {"false": {"\ud800": 1}}}, ["boolean", "false_description"]),
    ({"type": "choice", "criteria": {"a\ud800": None, "b": None}}, ["choice", "options", 0, "description"]),
    ({"type": "choice", "criteria": {"a": None, "b": "\udfff"}}, ["choice", "options", 1, "description"]),
    ({"type": "score", "instructions": "\ud800", "criteria": ["low", "high"]}, ["score", "instructions"]),
    ({"type": "score", "criteria": ["low", "hi\udc00"]}, ["score", "levels", 1]),
])
def test_a_lone_surrogate_in_a_question_is_not_a_string_at_its_native_loc(question, loc):
    """The reference validates each question as its native one (a noul is a "boolean"); pydantic
    cannot read a lone surrogate as a string there: 5 parts and more, no position."""
    assert refused(with_question(question)) == {"loc": ["body", "questions", "q", *loc], "msg": NOT_UNICODE,
                                                 "type": "string_unicode"}


def test_a_lone_surrogate_in_the_model_is_pydantics_own_schema_error():
    with pytest.raises(ApiError) as caught:
        prepare({**VALID, "model": "jev-\udfff"}, PROFILE)
    assert json.loads(caught.value.json()) == {"detail": [{"type": "string_unicode", "loc": ["body", "model"],
                                                           "msg": NOT_UNICODE, "input": "jev-\udfff"}]}


def test_a_surrogate_state_with_bad_instructions_gets_the_schema_errors_first():
    with pytest.raises(ApiError) as caught:
        prepare({**VALID, "state": "\ud800", "questions": {"q": {"type": "noul", "instructions": 5}}}, PROFILE)
    assert [e["type"] for e in json.loads(caught.value.json())["detail"]] == ["string_type", "dict_type", "list_type"]


def test_a_lone_surrogate_in_a_question_id_is_accepted():
    prepared = prepare(with_question({"type": "noul"}, "q\ud800"), PROFILE)
    assert list(prepared.request.questions) == ["q\ud800"]


def all_refused(body) -> list[dict]:
    with pytest.raises(ApiError) as caught:
        prepare(body, PROFILE)
    assert caught.value.status == 422
    return json.loads(caught.value.json())["detail"]


UNKNOWN = {"loc": ["body", "model"], "type": "value_error",
           "msg": "Unknown model 'gpt-4': this server answers as 'gemma-3-270m' and accepts any 'jev-*' alias"}
EMPTY = {"loc": ["body"], "msg": "Value error, State must not be empty", "type": "value_error"}
IDS = {"loc": ["body"], "msg": "Value error, Question IDs must have 1–128 nonblank characters", "type": "value_error"}


def test_an_empty_state_and_an_unknown_model_are_both_reported_in_loc_order():
    bad_state, bad_model, bad_id = {"state": ""}, {"model": "gpt-4"}, {"questions": {" ": {"type": "noul"}}}
    assert all_refused({**VALID, **bad_state, **bad_model, **bad_id}) == [EMPTY, UNKNOWN]  # state before ids
    assert all_refused({**VALID, **bad_model, **bad_id}) == [IDS, UNKNOWN]


def test_text_errors_are_all_listed_and_hide_the_request_wide_checks_but_not_the_model():
    long, empty_level = {"type": "noul", "instructions": "x" * 8001}, {"type": "score", "criteria": ["a", " "]}
    body = {"model": "gpt-4", "state": "", "questions": {"l": long, "e": empty_level}}
    assert all_refused(body) == [
        UNKNOWN,
        {"loc": ["body", "questions", "l", "boolean", "instructions"], "type": "string_too_long",
         "msg": "String should have at most 8000 characters"},
        {"loc": ["body", "questions", "e", "score", "levels", 1], "type": "string_too_short",
         "msg": "String should have at least 1 character"}]


@pytest.mark.parametrize("level", ["", " ", "\n\t"])
def test_a_score_level_needs_at_least_one_character(level):
    assert refused(with_question({"type": "score", "criteria": ["low", level, "high"]})) == {
        "loc": ["body", "questions", "q", "score", "levels", 1], "msg": "String should have at least 1 character",
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
    ({"type": "noul", "instructions": LONG}, ["boolean", "instructions"]),  # the union member is "boolean"
    ({"type": "noul", "criteria": {"true": LONG}}, ["boolean", "true_description"]),
    ({"type": "noul", "criteria": {"false": LONG}}, ["boolean", "false_description"]),
    ({"type": "choice", "instructions": LONG, "criteria": {"a": None, "b": None}}, ["choice", "instructions"]),
    ({"type": "choice", "criteria": {"a": None, "b": LONG}}, ["choice", "options", 1, "description"]),
    ({"type": "choice", "criteria": {"a": None, LONG: None}}, ["choice", "options", 1, "description"]),
    ({"type": "score", "criteria": ["low", LONG]}, ["score", "levels", 1]),
    ({"type": "score", "criteria": ["low", {"text": "x" * 7990}]}, ["score", "levels", 1]),  # compact JSON counts
])
def test_text_over_8000_characters_is_refused_at_its_native_loc(question, loc):
    assert refused(with_question(question)) == {
        "loc": ["body", "questions", "q", *loc], "msg": "String should have at most 8000 characters",
        "type": "string_too_long"}


@pytest.mark.parametrize("question, limit", [
    (lambda n: {"type": "noul", "criteria": {"true": "x" * n}}, 7995),  # "Yes. " + text
    (lambda n: {"type": "noul", "criteria": {"false": "x" * n}}, 7996),  # "No. " + text
    (lambda n: {"type": "choice", "criteria": {"ab": "x" * n, "c": None}}, 7996),  # "ab: " + text
    (lambda n: {"type": "score", "criteria": ["low", {"t": "x" * n}]}, 7992),  # {"t":"…"}
])
def test_the_8000_character_limit_counts_what_the_reference_adds_to_a_text(question, limit):
    """The reference refuses a 7,996- or 7,997-character noul criterion: its native text is
    "Yes. " and the criterion, and that may have 8000 characters."""
    prepare(with_question(question(limit)), PROFILE)
    assert refused(with_question(question(limit + 1)))["type"] == "string_too_long"


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
