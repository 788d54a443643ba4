"""The checks a schema cannot express, run once the schema passed, in the short error form
({"loc", "msg", "type"}; the checks table of docs/wire.md). The first failing check is reported.

Nothing is ever truncated to fit: too long is an error. Pure functions (no HTTP), shared with
the offline `decide` command.
"""
from __future__ import annotations

import math
from typing import Any, Iterator

from gateway.errors import check_failed, non_finite, not_encodable
from gateway.prompts import Rendered, render_value
from gateway.wire import ChoiceQuestion, DecisionRequest, NoulQuestion, ScoreQuestion
from shared.profiles import Profile

MAX_QUESTIONS = 1024
MAX_ID_CHARS = 128
MAX_TEXT_CHARS = 8000
MAX_STATE_BYTES = 256_000


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


def rendered(value: Any) -> str:
    """render_value(value), or the error for a NaN/±Infinity inside it (body.py refuses those
    already; a value built in Python can still hold one), or for a lone surrogate, which is no
    character: it could be neither tokenized nor sent back as UTF-8."""
    try:
        text = render_value(value)
    except ValueError:
        raise non_finite(_first_non_finite(value)) from None
    encodable(value if isinstance(value, str) else text)  # a string's position counts as sent
    return text


def encodable(text: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise not_encodable(exc) from None


def _strings(value: Any) -> Iterator[str]:
    """Every string in a JSON value, keys included, in document order (no recursion)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            yield item
        elif isinstance(item, dict):
            stack.extend(reversed([x for kv in item.items() for x in kv]))
        elif isinstance(item, list):
            stack.extend(reversed(item))


def check_surrogates(body: Any) -> None:
    """Before the schema, as the reference does: a lone surrogate in state, model or any
    question's instructions is refused (the first string holding one is named)."""
    if not isinstance(body, dict):
        return
    questions = body.get("questions")
    fields = [body.get("state"), body.get("model")]
    if isinstance(questions, dict):
        fields += [q.get("instructions") for q in questions.values() if isinstance(q, dict)]
    for field in fields:
        for text in _strings(field):
            encodable(text)


def check_model(name: str, profile: Profile) -> None:
    if name != profile.name and not name.startswith("jev-"):
        raise check_failed(["body", "model"], f"Unknown model {name!r}: this server answers as "
                                              f"'{profile.name}' and accepts any 'jev-*' alias")


def check_state(state: str | dict | list) -> str:
    """The state as the model will read it, once it is known to be non-blank, finite and small enough."""
    text = rendered(state)
    if not state or (isinstance(state, str) and not text):
        raise check_failed(["body"], "Value error, State must not be empty")
    if len(text) > MAX_STATE_BYTES // 4 and len(text.encode("utf-8")) > MAX_STATE_BYTES:
        raise check_failed(["body"], "Value error, State exceeds 256 KB; no silent truncation")
    return text


def check_ids(questions: dict[str, Any]) -> None:
    if len(questions) > MAX_QUESTIONS:
        raise check_failed(["body", "questions"], f"Dictionary should have at most {MAX_QUESTIONS} items after "
                                                  f"validation, not {len(questions)}", "too_long")
    for qid in questions:
        if not 1 <= len(qid.strip()) <= MAX_ID_CHARS:
            raise check_failed(["body"], f"Value error, Question IDs must have 1–{MAX_ID_CHARS} nonblank characters")


def _texts(qid: str, q: NoulQuestion | ChoiceQuestion | ScoreQuestion) -> Iterator[tuple[list, Any]]:
    """(loc, value) of every free text of a question: instructions, descriptions, levels."""
    at = ["body", "questions", qid, q.type]
    yield [*at, "instructions"], q.instructions
    if isinstance(q, NoulQuestion) and q.criteria is not None:
        yield [*at, "criteria", "true"], q.criteria.true
        yield [*at, "criteria", "false"], q.criteria.false
    elif isinstance(q, ChoiceQuestion):
        for name, description in q.criteria.items():
            yield [*at, "criteria", name], description
    elif isinstance(q, ScoreQuestion):
        for i, level in enumerate(q.criteria):
            yield [*at, "criteria", i], level


def check_question(qid: str, q: NoulQuestion | ChoiceQuestion | ScoreQuestion) -> None:
    """Every text within its length, a score level not empty, levels distinct. Choice option
    names are rendered into the prompt too; only question ids are not (a surrogate there is fine)."""
    if isinstance(q, ChoiceQuestion):
        for name in q.criteria:
            encodable(name)
    for loc, value in _texts(qid, q):
        text = rendered(value)
        if len(text) > MAX_TEXT_CHARS:
            raise check_failed(loc, f"String should have at most {MAX_TEXT_CHARS} characters", "string_too_long")
        if not text and isinstance(q, ScoreQuestion) and loc[-1] != "instructions":
            raise check_failed(loc, "String should have at least 1 character", "string_too_short")
    if isinstance(q, ScoreQuestion):
        levels = [render_value(level) for level in q.criteria]
        if len(set(levels)) < len(levels):
            raise check_failed(["body", "questions", qid, "score"], "Value error, Levels must have distinct descriptions")


def check_request(req: DecisionRequest, profile: Profile) -> str:
    """Every check that needs no tokenizer, in the reference's field order (state, model,
    questions); returns the rendered state (render() reuses it)."""
    state_text = check_state(req.state)
    check_model(req.model, profile)
    check_ids(req.questions)
    for qid, question in req.questions.items():
        check_question(qid, question)
    return state_text


def check_context(rendered_request: Rendered, prefix: list[int], suffixes: list[list[int]], ctx: int) -> None:
    """Each question's longest prompt (shared prefix + its longest suffix) must fit the context."""
    for qid, start, end in rendered_request.spans:
        longest = len(prefix) + max(len(s) for s in suffixes[start:end])
        if longest > ctx:
            raise check_failed(["body"], f"Question {qid}: {longest} tokens exceeds the context limit {ctx} "
                                         f"(--ctx); no truncation")
