"""From a validated request to prompt text: one shared prefix per state, one suffix per yes/no job.

Only the gateway knows how questions become prompts (from the model profile); workers see
token ids. A `choice` or `score` question expands into several yes/no jobs here.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from gateway.wire import DecisionRequest, NoulQuestion
from shared.profiles import Profile


@dataclass(frozen=True)
class Rendered:
    prefix: str  # preamble + state part, shared by every job
    suffixes: list[str]  # one per yes/no job, in request order
    spans: list[tuple[str, int, int]]  # (question id, first job, end job)


def render_value(value: Any) -> str:
    """A state/instructions value as the model reads it: strings as they are, JSON indented."""
    if isinstance(value, str):
        return value.strip()
    return json.dumps(value, indent=1, ensure_ascii=False)


def _noul_text(profile: Profile, q: NoulQuestion) -> str:
    text = render_value(q.instructions) if q.instructions is not None else ""
    text = text or profile.default_question
    if q.criteria is not None:
        if q.criteria.true is not None:
            text += profile.true_means.format(text=render_value(q.criteria.true))
        if q.criteria.false is not None:
            text += profile.false_means.format(text=render_value(q.criteria.false))
    return text


def render(profile: Profile, req: DecisionRequest) -> Rendered:
    prefix = profile.preamble + profile.prefix.format(state=render_value(req.state))
    suffixes: list[str] = []
    spans: list[tuple[str, int, int]] = []
    for qid, question in req.questions.items():
        start = len(suffixes)
        suffixes.append(profile.suffix.format(question=_noul_text(profile, question)))
        spans.append((qid, start, len(suffixes)))
    return Rendered(prefix=prefix, suffixes=suffixes, spans=spans)
