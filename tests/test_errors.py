"""Error bodies: always strict JSON, whatever the client's input they echo."""
from __future__ import annotations

import json

from gateway.errors import ECHO_DEPTH, error_json, schema_errors


def strict(text: str):
    return json.loads(text, parse_constant=lambda c: (_ for _ in ()).throw(ValueError(c)))


def test_error_json_is_compact_and_keeps_utf8():
    assert error_json({"detail": [{"loc": ["body"], "msg": "ü 🚀"}]}) == '{"detail":[{"loc":["body"],"msg":"ü 🚀"}]}'


def test_non_finite_floats_are_echoed_as_strings():
    body = strict(error_json({"input": [float("nan"), float("inf"), float("-inf"), 1.5]}))
    assert body == {"input": ["NaN", "Infinity", "-Infinity", 1.5]}


def test_values_too_deep_to_encode_are_cut_not_a_crash():
    value: list = []
    for _ in range(5000):
        value = [value]
    text = error_json({"detail": [{"input": value}]})
    assert text.count("[") <= ECHO_DEPTH and '"..."' in text
    strict(text)


def test_a_lone_surrogate_is_escaped_not_a_crash():
    assert strict(error_json({"input": "a\ud800b"})) == {"input": "a\ud800b"}


def test_exceptions_in_ctx_become_empty_objects_like_fastapis_encoder():
    err = schema_errors([{"type": "value_error", "loc": ("x",), "msg": "Value error, no", "input": 1,
                          "ctx": {"error": ValueError("no")}}])
    assert strict(err.json()) == {"detail": [{"type": "value_error", "loc": ["body", "x"], "msg": "Value error, no",
                                              "input": 1, "ctx": {"error": {}}}]}


def test_an_error_echoing_a_deep_value_can_still_be_printed():
    value: list = []
    for _ in range(5000):
        value = [value]
    err = schema_errors([{"type": "extra_forbidden", "loc": ("x",), "msg": "Extra inputs are not permitted",
                          "input": value}])
    assert str(err).startswith('422 {"detail":') and repr(err) == "ApiError(422)"
