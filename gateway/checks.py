"""The checks a schema cannot express, run once the schema passed, in the short error form
({"loc", "msg", "type"}; the checks table of docs/wire.md).

They follow the reference server, which turns a System One request into a native request of
its own and validates that. Each question becomes a native question (a `noul` is a "boolean")
holding texts of 1–8000 characters after stripping: the instructions, "Yes. " or "No. " before a
noul criterion, "name: description" (or the name alone) for a choice option, and the score
levels. So a text's loc is the native one (["body", "questions", q, "boolean", "true_description"])
and its limit counts what is added to it. Errors are listed as pydantic lists that native
request's: every text of every question (its fields), else the first failing request-wide check
(state, then question ids); an unknown model is reported along with them, in loc order.

Nothing is ever truncated to fit: too long is an error. Pure functions (no HTTP), shared with
the offline `decide` command.
"""
from __future__ import annotations

import json
import math
from typing import Any, Iterator

from gateway.errors import ApiError, non_finite, not_encodable
from gateway.prompts import Rendered, render_value
from gateway.wire import ChoiceQuestion, DecisionRequest, NoulQuestion, ScoreQuestion
from shared.profiles import Profile

MAX_QUESTIONS = 1024
MAX_ID_CHARS = 128
MAX_TEXT_CHARS = 8000
MAX_STATE_BYTES = 256_000
NOT_UNICODE = "Input should be a valid string, unable to parse raw data as a unicode string"
Error = dict[str, Any]  # one short-form item


def error(loc: list, msg: str, kind: str = "value_error") -> Error:
    return {"loc": loc, "msg": msg, "type": kind}


def refuse(errors: list[Error]) -> ApiError:
    return ApiError(422, {"detail": errors})


def _first_non_finite(value: Any) -> float:
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            return item
        if isinstance(item, dict):
            stack.extend(reversed(list(item.values())))
        elif isinstance(item, list):
            stack.extend(reversed(item))
    raise AssertionError("no NaN or Infinity in the value")


def _dumps(value: Any, **compact: Any) -> str:
    """JSON as the reference renders it, or the error for a NaN/±Infinity inside (body.py refuses
    those already; a value built in Python, as `decide` reads it, can still hold one)."""
    try:
        return json.dumps(value, ensure_ascii=False, allow_nan=False, **compact)
    except ValueError:
        raise non_finite(_first_non_finite(value)) from None


def native_text(value: Any) -> str:
    """A text as the reference's native request holds it: a string stripped, JSON compact."""
    if value is None:
        return ""
    return value.strip() if isinstance(value, str) else _dumps(value, separators=(",", ":"))


def _native_texts(qid: str, q: NoulQuestion | ChoiceQuestion | ScoreQuestion) -> Iterator[tuple[list, str]]:
    """(native loc, native text) of each text of a question; instructions left empty get a
    default, so only theirs may be empty."""
    at = ["body", "questions", qid, "boolean" if isinstance(q, NoulQuestion) else q.type]
    yield [*at, "instructions"], native_text(q.instructions)
    if isinstance(q, NoulQuestion) and q.criteria is not None:
        for side, lead in (("true", "Yes. "), ("false", "No. ")):
            value = getattr(q.criteria, side)
            if value not in (None, ""):
                yield [*at, f"{side}_description"], lead + native_text(value)
    elif isinstance(q, ChoiceQuestion):
        for i, (name, description) in enumerate(q.criteria.items()):
            text = name if description in (None, "") else f"{name}: {native_text(description)}"
            yield [*at, "options", i, "description"], text
    elif isinstance(q, ScoreQuestion):
        for i, level in enumerate(q.criteria):
            yield [*at, "levels", i], native_text(level)


def question_errors(qid: str, q: NoulQuestion | ChoiceQuestion | ScoreQuestion) -> list[Error]:
    """Every text that is no string (a lone surrogate), empty or over 8000 characters; if none,
    a score's levels must be distinct."""
    errors = []
    for loc, text in _native_texts(qid, q):
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            errors.append(error(loc, NOT_UNICODE, "string_unicode"))
            continue
        length = len(text.strip())
        if length > MAX_TEXT_CHARS:
            errors.append(error(loc, f"String should have at most {MAX_TEXT_CHARS} characters", "string_too_long"))
        elif length == 0 and loc[-1] != "instructions":
            errors.append(error(loc, "String should have at least 1 character", "string_too_short"))
    if not errors and isinstance(q, ScoreQuestion):
        levels = [native_text(level) for level in q.criteria]
        if len(set(levels)) < len(levels):
            errors.append(error(["body", "questions", qid, "score"], "Value error, Levels must have distinct descriptions"))
    return errors


def state_error(state: str | dict | list, questions: dict[str, Any]) -> Error | None:
    """The reference's request-wide checks, the first that fails: state not blank, no NaN, no
    lone surrogate (its position counted in the state as JSON, quotes and escapes included),
    at most 256 KB as rendered; then the question ids."""
    if not state or (isinstance(state, str) and not state.strip()):
        return error(["body"], "Value error, State must not be empty")
    try:
        _dumps(state).encode("utf-8")
    except ApiError as exc:  # a NaN
        return exc.body["detail"][0]
    except UnicodeEncodeError as exc:
        return not_encodable(exc).body["detail"][0]
    text = render_value(state)
    if len(text) > MAX_STATE_BYTES // 4 and len(text.encode("utf-8")) > MAX_STATE_BYTES:
        return error(["body"], "Value error, State exceeds 256 KB; no silent truncation")
    if any(not 1 <= len(qid.strip()) <= MAX_ID_CHARS for qid in questions):
        return error(["body"], f"Value error, Question IDs must have 1–{MAX_ID_CHARS} nonblank characters")
    return None


def model_error(name: str, profile: Profile) -> Error | None:
    if name == profile.name or name.startswith("jev-"):
        return None
    return error(["body", "model"], f"Unknown model {name!r}: this server answers as '{profile.name}' and "
                                    f"accepts any 'jev-*' alias")


def check_request(req: DecisionRequest, profile: Profile) -> str:
    """Every check that needs no tokenizer; returns the state as the model reads it (render()
    reuses it). Field errors (texts, then over 1024 questions) hide the request-wide checks, as
    pydantic runs a model's own validator only once its fields are valid."""
    fields = [e for qid, question in req.questions.items() for e in question_errors(qid, question)]
    if not fields and len(req.questions) > MAX_QUESTIONS:
        fields.append(error(["body", "questions"], f"Dictionary should have at most {MAX_QUESTIONS} items after "
                                                   f"validation, not {len(req.questions)}", "too_long"))
    first = None if fields else state_error(req.state, req.questions)
    errors = [e for e in (first, model_error(req.model, profile)) if e is not None] + fields
    if errors:
        raise refuse(errors)
    return render_value(req.state)


def check_context(rendered_request: Rendered, prefix: list[int], suffixes: list[list[int]], ctx: int) -> None:
    """Each question's longest prompt (shared prefix + its longest suffix) must fit the context."""
    for qid, start, end in rendered_request.spans:
        longest = len(prefix) + max(len(s) for s in suffixes[start:end])
        if longest > ctx:
            raise refuse([error(["body"], f"Question {qid}: {longest} tokens exceeds the context limit {ctx} "
                                          f"(--ctx); no truncation")])
