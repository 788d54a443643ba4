"""From a validated request to prompt text: one shared prefix per state, one suffix per yes/no job.

Only the gateway knows how questions become prompts (from the model profile's templates);
workers see token ids. A `noul` is one job, a `choice` one job per option, a `score` one
threshold job per level above the lowest — all continuing the same state prefix.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from gateway.wire import ChoiceQuestion, DecisionRequest, NoulQuestion, ScoreQuestion
from shared.profiles import Profile


@dataclass(frozen=True)
class Rendered:
    prefix: str  # preamble + state part, shared by every job
    suffixes: list[str]  # one per yes/no job, in request order
    spans: list[tuple[str, int, int]]  # (question id, first job, end job), in request order


def render_value(value: Any) -> str:
    """A state/instructions/criteria value as the model reads it: strings stripped, JSON indented
    with key order kept. A NaN/Infinity raises ValueError (gateway/checks.py reports it)."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value.strip()
    return json.dumps(value, indent=1, ensure_ascii=False, allow_nan=False)


def _instructions(value: Any, default: str) -> str:
    return render_value(value) or default


def noul_text(profile: Profile, q: NoulQuestion) -> str:
    text = _instructions(q.instructions, profile.default_question)
    if q.criteria is not None:
        if q.criteria.true is not None:
            text += profile.true_means.format(text=render_value(q.criteria.true))
        if q.criteria.false is not None:
            text += profile.false_means.format(text=render_value(q.criteria.false))
    return text


def choice_texts(profile: Profile, q: ChoiceQuestion) -> list[str]:
    """One yes/no question per option, in the order the options were given."""
    instructions = _instructions(q.instructions, profile.choice_default)
    texts = []
    for name, description in q.criteria.items():
        about = render_value(description)
        option = profile.option_described.format(name=name.strip(), text=about) if about else name.strip()
        texts.append(profile.choice_question.format(instructions=instructions, option=option))
    return texts


def score_texts(profile: Profile, q: ScoreQuestion) -> list[str]:
    """One threshold question per level above the lowest: "is it at level k or higher?"."""
    instructions = _instructions(q.instructions, profile.score_default)
    return [profile.score_question.format(instructions=instructions, level=render_value(level))
            for level in q.criteria[1:]]


def question_texts(profile: Profile, q: NoulQuestion | ChoiceQuestion | ScoreQuestion) -> list[str]:
    if isinstance(q, NoulQuestion):
        return [noul_text(profile, q)]
    if isinstance(q, ChoiceQuestion):
        return choice_texts(profile, q)
    return score_texts(profile, q)


def render(profile: Profile, req: DecisionRequest, state_text: str | None = None) -> Rendered:
    """state_text: the state as render_value() gives it, when the caller has it already."""
    state = render_value(req.state) if state_text is None else state_text
    prefix = profile.preamble + profile.prefix.format(state=state)
    suffixes: list[str] = []
    spans: list[tuple[str, int, int]] = []
    for qid, question in req.questions.items():
        start = len(suffixes)
        suffixes.extend(profile.suffix.format(question=text) for text in question_texts(profile, question))
        spans.append((qid, start, len(suffixes)))
    return Rendered(prefix=prefix, suffixes=suffixes, spans=spans)
