"""Schema validation without a server: pydantic's errors in FastAPI's 422 shape, byte for byte
where docs/wire.md gives an example."""
from __future__ import annotations

import json
from typing import Union

import pytest
from pydantic import JsonValue, TypeAdapter, ValidationError

from gateway.errors import ECHO_DEPTH, ApiError
from gateway.wire import MAX_DEPTH, ChoiceQuestion, DecisionRequest, NoulQuestion, ScoreQuestion, json_depth, validate

VALID = {"model": "jev-latest", "state": "I was charged twice for the same order.",
         "questions": {"billing": {"type": "noul", "instructions": "Is this a billing problem?"}}}


def errors(body) -> list[dict]:
    with pytest.raises(ApiError) as caught:
        validate(body)
    assert caught.value.status == 422
    return json.loads(caught.value.json())["detail"]


def compact(value) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def with_question(question) -> dict:
    return {**VALID, "questions": {"q": question}}


def test_empty_body_is_missing_at_body():
    assert compact(errors(None)) == '[{"type":"missing","loc":["body"],"msg":"Field required","input":null}]'


@pytest.mark.parametrize("body", [[VALID], "a string", 42, 1.5, True])
def test_body_a_list_string_or_number_is_model_attributes_type(body):
    assert errors(body) == [{"type": "model_attributes_type", "loc": ["body"],
                             "msg": "Input should be a valid dictionary or object to extract fields from",
                             "input": body}]


def test_missing_field_echoes_the_body():
    body = {k: v for k, v in VALID.items() if k != "model"}
    assert errors(body) == [{"type": "missing", "loc": ["body", "model"], "msg": "Field required", "input": body}]


def test_unknown_top_level_field_is_extra_forbidden():
    assert compact(errors({**VALID, "mode": "direct"})) == (
        '[{"type":"extra_forbidden","loc":["body","mode"],"msg":"Extra inputs are not permitted","input":"direct"}]')


@pytest.mark.parametrize("question, loc", [
    ({"type": "noul", "instruction": "typo"}, ["body", "questions", "q", "noul", "instruction"]),
    ({"type": "noul", "criteria": {"true": "y", "maybe": "m"}}, ["body", "questions", "q", "noul", "criteria", "maybe"]),
    ({"type": "choice", "criteria": {"a": None, "b": None}, "multi": True}, ["body", "questions", "q", "choice", "multi"]),
    ({"type": "score", "criteria": ["a", "b"], "scale": 3}, ["body", "questions", "q", "score", "scale"]),
])
def test_unknown_question_or_noul_criteria_field_is_extra_forbidden(question, loc):
    (err,) = errors(with_question(question))
    assert err["type"] == "extra_forbidden" and err["loc"] == loc


# The reference types state as `str | dict[str, JsonValue] | list[JsonValue]`: its errors, from pydantic itself
REFERENCE_STATE = TypeAdapter(Union[str, dict[str, JsonValue], list[JsonValue]])
JSON_DICT = "dict[str,json-or-python[json=any,python=tagged-union[list[...],dict[str,...],str,bool,int,float,none]]]"
JSON_LIST = "list[json-or-python[json=any,python=tagged-union[list[...],dict[str,...],str,bool,int,float,none]]]"


def reference_state_errors(state) -> list[dict]:
    with pytest.raises(ValidationError) as caught:
        REFERENCE_STATE.validate_python(state)
    return [{"type": e["type"], "loc": ["body", "state", *e["loc"]], "msg": e["msg"], "input": e["input"]}
            for e in caught.value.errors(include_url=False)]


@pytest.mark.parametrize("state", [42, 1.5, True, None])
def test_state_of_a_wrong_type_gives_three_errors_at_the_union_member_locs(state):
    assert errors({**VALID, "state": state}) == reference_state_errors(state) == [
        {"type": "string_type", "loc": ["body", "state", "str"], "msg": "Input should be a valid string", "input": state},
        {"type": "dict_type", "loc": ["body", "state", JSON_DICT], "msg": "Input should be a valid dictionary",
         "input": state},
        {"type": "list_type", "loc": ["body", "state", JSON_LIST], "msg": "Input should be a valid list", "input": state},
    ]


def test_fields_are_validated_and_listed_in_the_order_state_model_questions():
    got = errors({"questions": {}, "model": "", "state": 5})
    assert [e["loc"][1] for e in got] == ["state"] * 3 + ["model", "questions"]


@pytest.mark.parametrize("tag", ["yesno", "NOUL", 5, None])
def test_bad_question_tag_is_union_tag_invalid(tag):
    assert errors(with_question({"type": tag})) == [{
        "type": "union_tag_invalid", "loc": ["body", "questions", "q"],
        "msg": f"Input tag '{tag}' found using 'type' does not match any of the expected tags: 'noul', 'choice', 'score'",
        "input": {"type": tag},
        "ctx": {"discriminator": "'type'", "tag": str(tag), "expected_tags": "'noul', 'choice', 'score'"}}]


def test_question_without_a_tag_is_union_tag_not_found():
    assert errors(with_question({"instructions": "x"})) == [{
        "type": "union_tag_not_found", "loc": ["body", "questions", "q"],
        "msg": "Unable to extract tag using discriminator 'type'", "input": {"instructions": "x"},
        "ctx": {"discriminator": "'type'"}}]


def test_empty_model_is_string_too_short():
    assert compact(errors({**VALID, "model": ""})) == (
        '[{"type":"string_too_short","loc":["body","model"],"msg":"String should have at least 1 character",'
        '"input":"","ctx":{"min_length":1}}]')


def test_empty_questions_is_too_short():
    assert errors({**VALID, "questions": {}}) == [{
        "type": "too_short", "loc": ["body", "questions"],
        "msg": "Dictionary should have at least 1 item after validation, not 0", "input": {},
        "ctx": {"field_type": "Dictionary", "min_length": 1, "actual_length": 0}}]


def nested(depth: int):
    value: list = []
    for _ in range(depth - 1):
        value = [value]
    return value


def nested_dict(depth: int):
    value: dict = {}
    for _ in range(depth - 1):
        value = {"a": value}
    return value


def test_json_depth_counts_containers():
    assert [json_depth(v) for v in ("x", [], {}, [{"a": [1]}], nested(5))] == [0, 1, 1, 3, 5]


@pytest.mark.parametrize("where", ["state", "instructions", "level"])
@pytest.mark.parametrize("shape", ["list", "dict"])
def test_nesting_99_levels_or_more_is_refused_through_the_unions_own_errors(where, shape):
    def body(value):
        if where == "state":
            return {**VALID, "state": value}
        if where == "instructions":
            return with_question({"type": "noul", "instructions": value})
        return with_question({"type": "score", "criteria": ["low", value]})

    deep = nested if shape == "list" else nested_dict
    assert MAX_DEPTH == 98
    validate(body(deep(MAX_DEPTH)))
    for depth in (99, 150, 300, 900):
        got = errors(body(deep(depth)))
        assert got[0]["type"] == "string_type" and json_depth(got[0]["input"]) == ECHO_DEPTH  # cut there, "..." below
        assert {e["type"] for e in got} <= {"string_type", "dict_type", "list_type", "invalid-json-value"}
        assert len(got) == 3 and got[0]["loc"][-1] == "str" and {JSON_DICT, JSON_LIST} <= {
            loc for e in got for loc in e["loc"]}
        assert all(e["loc"][:2] == ["body", "state" if where == "state" else "questions"] for e in got)
    if where == "state":  # at the depth pydantic's own guard trips, its errors lead the same way
        reference = reference_state_errors(deep(300))
        assert [e["type"] for e in reference][0] == "string_type" and len(reference) == 3


@pytest.mark.parametrize("criteria", [{}, {"only": "one"}])
def test_choice_with_fewer_than_two_options_is_a_value_error_on_the_choice(criteria):
    question = {"type": "choice", "criteria": criteria}
    assert errors(with_question(question)) == [{
        "type": "value_error", "loc": ["body", "questions", "q", "choice"],
        "msg": "Value error, A choice needs at least two options", "input": question, "ctx": {"error": {}}}]


@pytest.mark.parametrize("name", ["", " ", "\t\n"])
def test_choice_option_name_blank_is_a_value_error_on_the_choice(name):
    (err,) = errors(with_question({"type": "choice", "criteria": {"a": None, name: "x"}}))
    assert (err["loc"], err["msg"]) == (["body", "questions", "q", "choice"],
                                        "Value error, Choice option names must not be blank")


def test_choice_takes_2_to_255_options():
    validate(with_question({"type": "choice", "criteria": {f"o{i}": None for i in range(255)}}))
    (err,) = errors(with_question({"type": "choice", "criteria": {f"o{i}": None for i in range(256)}}))
    assert err["type"] == "value_error" and err["loc"] == ["body", "questions", "q", "choice"]


def test_choice_criteria_are_required():
    (err,) = errors(with_question({"type": "choice", "instructions": "Which?"}))
    assert (err["type"], err["loc"]) == ("missing", ["body", "questions", "q", "choice", "criteria"])


@pytest.mark.parametrize("n", [0, 1, 11])
def test_score_with_fewer_than_2_or_more_than_10_levels_is_a_value_error_on_the_score(n):
    question = {"type": "score", "criteria": [f"level {i}" for i in range(n)]}
    assert errors(with_question(question)) == [{
        "type": "value_error", "loc": ["body", "questions", "q", "score"],
        "msg": f"Value error, A score takes 2 to 10 ordered levels; got {n}", "input": question, "ctx": {"error": {}}}]


def test_score_level_null_is_refused():
    locs = [e["loc"] for e in errors(with_question({"type": "score", "criteria": ["low", None]}))]
    assert locs == [["body", "questions", "q", "score", "criteria", 1, m] for m in ("str", JSON_DICT, JSON_LIST)]


def test_score_criteria_must_be_an_array():
    (err,) = errors(with_question({"type": "score", "criteria": {"low": 0, "high": 1}}))
    assert (err["type"], err["loc"]) == ("list_type", ["body", "questions", "q", "score", "criteria"])


def test_every_shape_the_spec_allows_validates():
    req = validate({"model": "gemma-3-270m", "state": {"order": 17, "items": ["a", {"b": None}]}, "questions": {
        "n0": {"type": "noul"},
        "n1": {"type": "noul", "instructions": None, "criteria": None},
        "n2": {"type": "noul", "instructions": {"ask": "refund?"}, "criteria": {"true": "wants money back"}},
        "n3": {"type": "noul", "instructions": ["a", "b"], "criteria": {"false": {"k": 1}}},
        "c": {"type": "choice", "criteria": {"billing": "payments", "tech": None, "other": ["x"], "x": {"y": 1}}},
        "s": {"type": "score", "instructions": "How upset?", "criteria": ["calm", {"level": 1}, ["furious"]]},
    }})
    assert isinstance(req, DecisionRequest)
    assert [type(q) for q in req.questions.values()] == [NoulQuestion] * 4 + [ChoiceQuestion, ScoreQuestion]
    assert list(req.questions) == ["n0", "n1", "n2", "n3", "c", "s"]
    validate({**VALID, "state": ["an", "array"]})


def test_option_names_are_kept_byte_for_byte():
    req = validate(with_question({"type": "choice", "criteria": {" padded ": None, "Ünï 🚀": None, "a\nb": None}}))
    assert list(req.questions["q"].criteria) == [" padded ", "Ünï 🚀", "a\nb"]


def test_an_error_echoing_nan_is_still_strict_json():
    with pytest.raises(ApiError) as caught:
        validate({**VALID, "model": float("nan"), "state": float("inf")})
    text = caught.value.json()
    assert "NaN" in text and "Infinity" in text
    json.loads(text, parse_constant=lambda c: pytest.fail(f"non-JSON constant {c}"))


@pytest.mark.parametrize("depth", [200, 900])
def test_a_deep_value_in_a_wrong_place_is_echoed_as_json(depth):
    (err,) = errors({**VALID, "mode": nested(depth)})
    assert err["type"] == "extra_forbidden" and json_depth(err["input"]) <= depth
