"""The decision workloads of loadtest/workloads.json, as request bodies and as prompt text.

W1: short one-question requests; W2: one question about a ~300-token state; W3: five long
states asked many questions (request k: state k % 5, question k // 5), so a server that keeps
a state's prefix gains. W4 is built from W2: request k asks W4_QUESTIONS distinct noul questions
(W2's question k and the next distinct ones in file order) about W2's state k, except that every W4_CHOICE_EVERY-th
request is one choice among CHOICE_OPTIONS options instead; its answers are counted per
question (a choice is one). Entries are used in file order; the same order for every target, so
the comparison sends the same prompts.

The baselines get the prompt text our gateway would render (gateway/prompts.py and the model
profile), one prompt per yes/no job, which is what makes their numbers comparable with ours.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from gateway.prompts import render
from gateway.wire import MAX_OPTIONS, DecisionRequest
from shared.profiles import Profile

WORKLOADS_FILE = Path(__file__).with_name("workloads.json")
QUESTION_ID = "q"  # the id of a request's only question
W4_QUESTIONS = 20
W4_CHOICE_EVERY = 20
CHOICE_OPTIONS = MAX_OPTIONS  # the largest choice the API takes
CHOICE_INSTRUCTIONS = "Within how many days must the problem be solved before a refund is due?"


@dataclass(frozen=True)
class Item:
    """One request: a state and its noul questions, or (when `options` is set) one choice whose
    instructions are questions[0]."""

    state: str
    questions: tuple[str, ...]
    options: tuple[str, ...] = ()

    @property
    def question_ids(self) -> tuple[str, ...]:
        if self.options or len(self.questions) == 1:
            return (QUESTION_ID,)
        return tuple(f"{QUESTION_ID}{i}" for i in range(len(self.questions)))


@lru_cache(maxsize=None)
def _file() -> dict[str, list[dict]]:
    return json.loads(WORKLOADS_FILE.read_text())["workloads"]


@lru_cache(maxsize=None)
def names() -> tuple[str, ...]:
    return (*_file(), "W4")


@lru_cache(maxsize=None)
def load(name: str) -> tuple[Item, ...]:
    if name == "W4":
        return _w4(load("W2"))
    if name not in _file():
        raise ValueError(f"unknown workload {name!r}; choose from {', '.join(names())}")
    return tuple(Item(state=e["state"], questions=(e["question"],)) for e in _file()[name])


def _w4(w2: tuple[Item, ...]) -> tuple[Item, ...]:
    options = tuple(f"{n} days" for n in range(1, CHOICE_OPTIONS + 1))
    distinct = list(dict.fromkeys(item.questions[0] for item in w2))
    items = []
    for k, item in enumerate(w2):
        if k % W4_CHOICE_EVERY == W4_CHOICE_EVERY - 1:
            items.append(Item(state=item.state, questions=(CHOICE_INSTRUCTIONS,), options=options))
        else:
            first = distinct.index(item.questions[0])
            asked = tuple(distinct[(first + i) % len(distinct)] for i in range(W4_QUESTIONS))
            items.append(Item(state=item.state, questions=asked))
    return tuple(items)


def decision_body(item: Item, model: str = "jev-latest") -> dict:
    """The POST /v1/systemone body for one item."""
    if item.options:
        questions = {QUESTION_ID: {"type": "choice", "instructions": item.questions[0],
                                   "criteria": dict.fromkeys(item.options)}}
    else:
        questions = {qid: {"type": "noul", "instructions": text} for qid, text in zip(item.question_ids, item.questions)}
    return {"model": model, "state": item.state, "questions": questions}


@lru_cache(maxsize=4096)
def prompt_texts(profile: Profile, item: Item) -> tuple[str, ...]:
    """The whole prompts our gateway renders for `item` (preamble + state + question), one per
    yes/no job: one per noul question, one per option of a choice."""
    rendered = render(profile, DecisionRequest.model_validate(decision_body(item)))
    return tuple(rendered.prefix + suffix for suffix in rendered.suffixes)
