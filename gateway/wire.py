"""The System One request and response shapes (docs/wire.md), as pydantic v2 models.

Schema errors come out of pydantic already in FastAPI's 422 shape (validate() adds the "body"
loc prefix the way FastAPI does); checks a schema cannot express live in gateway/checks.py and
use the short error form. Nothing here knows about HTTP, so the offline `decide` command
validates a request file with the same code.
"""
from __future__ import annotations

from typing import Annotated, Any, Literal, Union

from pydantic import (BaseModel, ConfigDict, Field, JsonValue, StringConstraints, ValidationError,
                      ValidatorFunctionWrapHandler, WrapValidator, model_validator)

from gateway.errors import missing_body, schema_errors

MAX_DEPTH = 98  # nesting levels of a JSON value inside one field; the reference refuses 99 and more
MAX_OPTIONS = 255  # the hosted API's limit on choice options (jevOS caps at 26; we follow the API)
MIN_LEVELS, MAX_LEVELS = 2, 10


def json_depth(value: Any) -> int:
    """Nesting depth of a JSON value ({} and [] are 1), without recursion: a deep value must
    not be able to raise RecursionError in the gateway."""
    deepest, stack = 0, [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            item = item.values()
        elif not isinstance(item, list):
            continue
        depth += 1
        deepest = max(deepest, depth)
        stack.extend((child, depth) for child in item if isinstance(child, (dict, list)))
    return deepest


class TooDeep:
    """Stands in for a container nested past MAX_DEPTH. It is no JSON value, so pydantic refuses
    it with the union's own errors (string_type first); validate() echoes the original in its place."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value


def _cut(value: Any, levels: int) -> Any:
    """A copy of `value` whose containers below `levels` levels are TooDeep (recursion <= levels)."""
    if not isinstance(value, (dict, list)):
        return value
    if levels == 0:
        return TooDeep(value)
    if isinstance(value, dict):
        return {k: _cut(v, levels - 1) for k, v in value.items()}
    return [_cut(v, levels - 1) for v in value]


def _uncut(value: Any, levels: int = MAX_DEPTH + 1) -> Any:
    """The inverse of _cut, for the inputs errors echo (TooDeep only ever sits this high)."""
    if isinstance(value, TooDeep):
        return value.value
    if levels == 0 or not isinstance(value, (dict, list)):
        return value
    if isinstance(value, dict):
        return {k: _uncut(v, levels - 1) for k, v in value.items()}
    return [_uncut(v, levels - 1) for v in value]


def _within_depth(value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
    if isinstance(value, (dict, list)) and json_depth(value) > MAX_DEPTH:
        value = _cut(value, MAX_DEPTH)
    return handler(value)


# pydantic's own JsonValue, as in the reference server: the union members keep pydantic's labels
# ("str", "dict[str,json-or-python[...]]", "list[json-or-python[...]]"), where the errors of a wrongly
# typed value point: ["body", "state", "str"] ...
Content = Annotated[Union[str, dict[str, JsonValue], list[JsonValue]], WrapValidator(_within_depth)]
OptionalContent = Annotated[Union[str, dict[str, JsonValue], list[JsonValue], None], WrapValidator(_within_depth)]


class _Strict(BaseModel):
    """Unknown fields are refused (extra_forbidden): a typo is an error, not silently ignored."""

    model_config = ConfigDict(extra="forbid")


class NoulCriteria(_Strict):
    true: OptionalContent = None
    false: OptionalContent = None


class NoulQuestion(_Strict):
    type: Literal["noul"]
    instructions: OptionalContent = None
    criteria: NoulCriteria | None = None


class ChoiceQuestion(_Strict):
    type: Literal["choice"]
    instructions: OptionalContent = None
    criteria: dict[str, OptionalContent]  # option name -> description (or null)

    @model_validator(mode="after")
    def _options(self) -> ChoiceQuestion:
        if len(self.criteria) < 2:
            raise ValueError("A choice needs at least two options")
        if len(self.criteria) > MAX_OPTIONS:
            raise ValueError(f"A choice takes at most {MAX_OPTIONS} options; got {len(self.criteria)}")
        if any(not name.strip() for name in self.criteria):
            raise ValueError("Choice option names must not be blank")
        return self


class ScoreQuestion(_Strict):
    type: Literal["score"]
    instructions: OptionalContent = None
    criteria: list[Content]  # levels, low to high; null is not a level

    @model_validator(mode="after")
    def _levels(self) -> ScoreQuestion:
        if not MIN_LEVELS <= len(self.criteria) <= MAX_LEVELS:
            raise ValueError(f"A score takes {MIN_LEVELS} to {MAX_LEVELS} ordered levels; got {len(self.criteria)}")
        return self


Question = Annotated[Union[NoulQuestion, ChoiceQuestion, ScoreQuestion], Field(discriminator="type")]


class DecisionRequest(_Strict):
    """Fields in the reference's order, which is the order they are validated and errors listed."""

    state: Content
    model: Annotated[str, StringConstraints(min_length=1)]
    questions: Annotated[dict[str, Question], Field(min_length=1)]


def validate(body: Any) -> DecisionRequest:
    """The parsed body as a request, or ApiError(422) with pydantic's errors in FastAPI's shape.

    from_attributes=True is how FastAPI validates a body, and why a list or string body is a
    `model_attributes_type` error rather than `model_type`. No body at all is `missing`."""
    if body is None:
        raise missing_body()
    try:
        return DecisionRequest.model_validate(body, from_attributes=True)
    except ValidationError as exc:
        raise schema_errors({**err, "input": _uncut(err.get("input"))}
                            for err in exc.errors(include_url=False)) from None


# --- response ---------------------------------------------------------------------------
class NoulAnswer(BaseModel):
    type: Literal["noul"] = "noul"
    noul: float


class ChoiceAnswer(BaseModel):
    type: Literal["choice"] = "choice"
    choice: str
    probabilities: dict[str, float]
    confidence: float


class ScoreAnswer(BaseModel):
    type: Literal["score"] = "score"
    score: float
    legend: dict[str, str]
    probabilities: dict[str, float]
    confidence: float


Answer = Union[NoulAnswer, ChoiceAnswer, ScoreAnswer]


class Usage(BaseModel):
    input_tokens: int
    output_tokens: int = 0


class DecisionResponse(BaseModel):
    model: str
    answers: dict[str, Answer]
    usage: Usage


class ModelCard(BaseModel):
    name: str
    description: str
    release_date: str


class ModelList(BaseModel):
    models: list[ModelCard]
