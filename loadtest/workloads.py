"""The decision workloads of loadtest/workloads.json, as request bodies and as prompt text.

W1: short one-question requests; W2: one question about a ~300-token state; W3: five long
states asked many questions (request k: state k % 5, question k // 5), so a server that keeps
a state's prefix gains. Entries are used in file order; the same order for every target, so
the comparison sends the same prompts.

The baselines get the prompt text our gateway would render (gateway/prompts.py and the model
profile), which is what makes their numbers comparable with ours.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from gateway.prompts import render
from gateway.wire import DecisionRequest
from shared.profiles import Profile

WORKLOADS_FILE = Path(__file__).with_name("workloads.json")
QUESTION_ID = "q"


@dataclass(frozen=True)
class Item:
    state: str
    question: str


@lru_cache(maxsize=None)
def names() -> tuple[str, ...]:
    return tuple(json.loads(WORKLOADS_FILE.read_text())["workloads"])


@lru_cache(maxsize=None)
def load(name: str) -> tuple[Item, ...]:
    workloads = json.loads(WORKLOADS_FILE.read_text())["workloads"]
    if name not in workloads:
        raise ValueError(f"unknown workload {name!r}; the file has {', '.join(workloads)}")
    return tuple(Item(state=e["state"], question=e["question"]) for e in workloads[name])


def decision_body(item: Item, model: str = "jev-latest") -> dict:
    """The POST /v1/systemone body for one item: one noul question."""
    return {"model": model, "state": item.state,
            "questions": {QUESTION_ID: {"type": "noul", "instructions": item.question}}}


@lru_cache(maxsize=4096)
def prompt_text(profile: Profile, item: Item) -> str:
    """The whole prompt our gateway renders for `item` (preamble + state + question)."""
    rendered = render(profile, DecisionRequest.model_validate(decision_body(item)))
    return rendered.prefix + rendered.suffixes[0]
