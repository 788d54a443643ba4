"""From the worker's yes−no logit margins to answers: P(yes) per job, then per question type.

- noul: P(yes) of its one job.
- choice: P(yes) of each option's job, normalised to sum to 1 (in log space, so options whose
  P(yes) underflows still get their share); confidence = (n·max − 1)/(n − 1).
- score: job k answers "is it at level k or higher?", a survival curve S(k). Made monotone
  (non-increasing) by pool-adjacent-violators, it gives P(level = i) = S(i) − S(i+1) with
  S(0) = 1 and S(n) = 0; score = Σ i·P(i) (= Σ S(k)).
"""
from __future__ import annotations

import json
import math
from typing import Any

from gateway.prompts import Rendered
from gateway.wire import Answer, ChoiceAnswer, ChoiceQuestion, DecisionRequest, NoulAnswer, ScoreAnswer, ScoreQuestion
from shared.profiles import Profile


def calibrated_logit(profile: Profile, margin: float) -> float:
    return profile.scale * margin + profile.bias


def sigmoid(z: float) -> float:
    return 1.0 / (1.0 + math.exp(-z)) if z >= 0 else math.exp(z) / (1.0 + math.exp(z))


def p_yes(profile: Profile, margin: float) -> float:
    return sigmoid(calibrated_logit(profile, margin))


def log_sigmoid(z: float) -> float:
    return -math.log1p(math.exp(-z)) if z >= 0 else z - math.log1p(math.exp(z))


def normalise_yes(logits: list[float]) -> list[float]:
    """P(yes)_i / Σ P(yes)_j, computed from the logits as a softmax of log-sigmoids."""
    logs = [log_sigmoid(z) for z in logits]
    top = max(logs)
    weights = [math.exp(v - top) for v in logs]
    total = sum(weights)
    return [w / total for w in weights]


def confidence(probabilities: list[float]) -> float:
    """(n·max − 1)/(n − 1): 0 for a uniform answer, 1 for a certain one."""
    n = len(probabilities)
    return min(1.0, max(0.0, (n * max(probabilities) - 1.0) / (n - 1)))


def pool_adjacent_violators(values: list[float]) -> list[float]:
    """The closest non-increasing sequence (least squares, equal weights): adjacent values that
    break the order are pooled into their mean until none does."""
    blocks: list[list[float]] = []  # [mean, count]
    for v in values:
        blocks.append([v, 1])
        while len(blocks) > 1 and blocks[-2][0] < blocks[-1][0]:
            mean, count = blocks.pop()
            prev = blocks[-1]
            prev[0] = (prev[0] * prev[1] + mean * count) / (prev[1] + count)
            prev[1] += count
    return [mean for mean, count in blocks for _ in range(int(count))]


def level_distribution(survival: list[float]) -> list[float]:
    """P(level = i) for n = len(survival) + 1 levels from S(1..n−1) = P(level ≥ k)."""
    s = [1.0, *pool_adjacent_violators(survival), 0.0]
    probabilities = [max(0.0, s[i] - s[i + 1]) for i in range(len(s) - 1)]
    total = sum(probabilities)
    return [p / total for p in probabilities]


def legend_text(level: Any) -> str:
    """A level as given: a string as is, an object or array as compact JSON."""
    return level if isinstance(level, str) else json.dumps(level, ensure_ascii=False, separators=(",", ":"))


def choice_answer(q: ChoiceQuestion, logits: list[float]) -> ChoiceAnswer:
    probabilities = normalise_yes(logits)
    names = list(q.criteria)
    best = max(range(len(names)), key=probabilities.__getitem__)  # the first of equals
    return ChoiceAnswer(choice=names[best], probabilities=dict(zip(names, probabilities)),
                        confidence=confidence(probabilities))


def score_answer(q: ScoreQuestion, survival: list[float]) -> ScoreAnswer:
    probabilities = level_distribution(survival)
    return ScoreAnswer(score=sum(i * p for i, p in enumerate(probabilities)),
                       legend={str(i): legend_text(level) for i, level in enumerate(q.criteria)},
                       probabilities={str(i): p for i, p in enumerate(probabilities)},
                       confidence=confidence(probabilities))


def assemble(profile: Profile, req: DecisionRequest, rendered: Rendered, margins: list[float]) -> dict[str, Answer]:
    """One answer per question, in request order, from the margins of its jobs."""
    if len(margins) != len(rendered.suffixes) or not all(math.isfinite(m) for m in margins):
        raise ValueError(f"worker returned {len(margins)} margins for {len(rendered.suffixes)} jobs, or a non-finite one")
    answers: dict[str, Answer] = {}
    for (qid, start, end), question in zip(rendered.spans, req.questions.values()):
        logits = [calibrated_logit(profile, m) for m in margins[start:end]]
        if isinstance(question, ChoiceQuestion):
            answers[qid] = choice_answer(question, logits)
        elif isinstance(question, ScoreQuestion):
            answers[qid] = score_answer(question, [sigmoid(z) for z in logits])
        else:
            answers[qid] = NoulAnswer(noul=sigmoid(logits[0]))
    return answers
