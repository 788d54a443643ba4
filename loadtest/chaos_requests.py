"""The chaos run's fixed requests and their reference answers.

Request i of a run is a pure function of (seed, i): its kind cycles through KINDS (noul, choice
and score questions; short and long states; requests of many questions), its texts come from the
load-test workloads, and its state starts with a reference line no other request of the run has
(as in loadtest/fresh.py), so the first time any worker sees it, it reads it from the start.

The reference is what one worker answers one client, one request at a time, with nothing else
running. Under chaos every 200 must carry exactly that: `same()` compares the parsed JSON, whose
floats are the exact values the gateway wrote (json round-trips a float's shortest repr).
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Callable

from jevfleet.harness.load import post
from loadtest import workloads

KINDS = ("short noul", "short choice", "short score", "long noul", "long mixed", "short many")
MANY = 10  # noul questions of a "short many" request
LEVELS = (("calm", "annoyed", "angry"), ("none", "low", "medium", "high"),
          ("very unlikely", "unlikely", "even", "likely", "very likely"))
OPTIONS = {"billing": "payments, refunds, invoices", "delivery": "parcels, couriers, delays",
           "technical": "devices that do not work", "account": None, "other": None}


@dataclass(frozen=True)
class Request:
    index: int
    kind: str
    body: dict


def _questions(pool: list[str], rng: random.Random, n: int) -> dict[str, dict]:
    return {f"q{k}": {"type": "noul", "instructions": text} for k, text in enumerate(rng.sample(pool, n))}


def _choice(rng: random.Random) -> dict:
    names = rng.sample(sorted(OPTIONS), rng.randint(2, len(OPTIONS)))
    return {"type": "choice", "instructions": "Which team should handle it?",
            "criteria": {name: OPTIONS[name] for name in names}}


def _score(rng: random.Random) -> dict:
    return {"type": "score", "instructions": "How upset is the writer?", "criteria": list(rng.choice(LEVELS))}


def request(seed: int, index: int) -> Request:
    """Request `index` of the run seeded `seed`: the same body for the same pair, always."""
    rng = random.Random(f"chaos:{seed}:{index}")
    kind = KINDS[index % len(KINDS)]
    short, long = workloads.load("W1"), workloads.load("W2")
    base = rng.choice(long if kind.startswith("long") else short)
    state = f"Case {rng.randrange(10_000, 100_000)}-{seed}-{index}: {base.state}"
    if kind == "short noul" or kind == "long noul":
        questions = {"q": {"type": "noul", "instructions": base.questions[0]}}
    elif kind == "short choice":
        questions = {"team": _choice(rng)}
    elif kind == "short score":
        questions = {"mood": _score(rng)}
    elif kind == "long mixed":
        pool = list(dict.fromkeys(item.questions[0] for item in long))
        questions = {**_questions(pool, rng, 4), "team": _choice(rng), "mood": _score(rng)}
    else:
        pool = list(dict.fromkeys(item.questions[0] for item in short))
        questions = _questions(pool, rng, MANY)
    return Request(index, kind, {"model": "jev-latest", "state": state, "questions": questions})


def requests(seed: int, count: int) -> list[Request]:
    return [request(seed, i) for i in range(count)]


def answer(body: dict) -> dict:
    """What must not move: the answers and the token counts."""
    return {"answers": body.get("answers"), "usage": body.get("usage")}


def same(body: dict, reference: dict) -> bool:
    return answer(body) == reference


def reference_answers(url: str, reqs: list[Request], progress: Callable[[str], None] = print) -> list[dict]:
    """Every request once, in order, from one client: its answer; RuntimeError on any non-200
    (the quiet fleet must answer everything)."""
    out = []
    for req in reqs:
        outcome = post(url, req.body, req.index, timeout=300)
        if outcome.status != 200:
            raise RuntimeError(f"reference request {req.index} ({req.kind}): {outcome.status} {outcome.body}")
        out.append(answer(outcome.body))
        if (req.index + 1) % 20 == 0:
            progress(f"reference: {req.index + 1}/{len(reqs)} answered")
    return out
