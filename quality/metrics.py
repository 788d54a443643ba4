"""Scores of probabilistic answers: accuracy, Brier score, expected calibration error (ECE).

Yes/no answers are scored as binary forecasts of "the answer is yes": Brier = mean (p − y)²,
and the reliability bins put P(yes) against how often the answer was yes. Choice and score
answers are scored on the whole distribution (Brier = mean Σₖ (pₖ − 1[k = answer])², 0..2) and
on their top option (bins put the top probability against how often the top option was right).
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import numpy as np

BINS = 15


@dataclass(frozen=True)
class Outcome:
    """One answered item: the probabilities given to its options and the right option."""

    id: str
    kind: str
    type: str  # noul | choice | score
    probs: tuple[float, ...]  # yes/no: (P(yes), P(no)); choice/score: one per option
    answer: int  # index into probs
    margin: float | None = None  # the raw yes−no logit margin (in-process yes/no items)
    tag: str = ""  # the item's tag (straightforward | adversarial), "" if untagged

    def event(self) -> tuple[float, bool]:
        """(forecast probability, whether the event happened) for reliability bins."""
        if self.type == "noul":
            return self.probs[0], self.answer == 0
        top = int(np.argmax(self.probs))
        return self.probs[top], top == self.answer

    @property
    def correct(self) -> bool:
        if self.type == "noul":
            return (self.probs[0] >= 0.5) == (self.answer == 0)
        return int(np.argmax(self.probs)) == self.answer

    @property
    def brier(self) -> float:
        if self.type == "noul":
            return (self.probs[0] - (self.answer == 0)) ** 2
        target = np.zeros(len(self.probs))
        target[self.answer] = 1.0
        return float(np.sum((np.asarray(self.probs) - target) ** 2))


@dataclass(frozen=True)
class Bin:
    lo: float
    hi: float
    count: int
    mean_p: float  # mean forecast in the bin (nan if empty)
    frequency: float  # how often the event happened (nan if empty)


@dataclass(frozen=True)
class Summary:
    name: str
    n: int
    accuracy: float
    brier: float
    ece: float
    bins: list[Bin]
    auc: float = float("nan")  # of P(yes), over the group's yes/no items (nan without both answers)
    skill: float = float("nan")  # Brier skill: 1 − Brier / Brier of the reference answer (see brier_skill)
    p10: float = float("nan")  # the 10th and 90th percentiles of the answers given: P(yes) for yes/no
    p90: float = float("nan")  # items, else the top option's probability; p90 − p10 is their spread

    @property
    def spread(self) -> float:
        return self.p90 - self.p10


def reliability(p: np.ndarray, hit: np.ndarray, bins: int = BINS) -> list[Bin]:
    """Equal-width bins over [0, 1]; a forecast of exactly 1 falls in the last bin."""
    edges = np.linspace(0.0, 1.0, bins + 1)
    which = np.clip(np.digitize(p, edges[1:-1], right=False), 0, bins - 1)
    out = []
    for b in range(bins):
        mask = which == b
        n = int(mask.sum())
        out.append(Bin(lo=float(edges[b]), hi=float(edges[b + 1]), count=n,
                       mean_p=float(p[mask].mean()) if n else float("nan"),
                       frequency=float(hit[mask].mean()) if n else float("nan")))
    return out


def ece(bins: list[Bin]) -> float:
    """Σ_bins (n_b / N) · |mean forecast − observed frequency|."""
    total = sum(b.count for b in bins)
    if not total:
        return float("nan")
    return sum(b.count / total * abs(b.mean_p - b.frequency) for b in bins if b.count)


def brier_skill(outcomes: list[Outcome]) -> float:
    """1 − Brier / Brier of a reference that knows nothing about the text: for yes/no items the
    group's base rate (always answering the share of yes), for choice/score items the uniform
    answer. 0 = no better than the reference, 1 = perfect, < 0 = worse; nan if the reference is
    itself perfect (a group with one answer only)."""
    noul = np.array([o.answer == 0 for o in outcomes if o.type == "noul"], dtype=float)
    reference = [float(noul.mean() * (1 - noul.mean()))] * len(noul) if len(noul) else []
    reference += [1.0 - 1.0 / len(o.probs) for o in outcomes if o.type != "noul"]
    ref = float(np.mean(reference))
    return 1.0 - float(np.mean([o.brier for o in outcomes])) / ref if ref > 0 else float("nan")


def summarize(name: str, outcomes: list[Outcome], bins: int = BINS) -> Summary:
    events = [o.event() for o in outcomes]
    p = np.array([e[0] for e in events], dtype=float)
    hit = np.array([e[1] for e in events], dtype=float)
    table = reliability(p, hit, bins)
    noul = [o for o in outcomes if o.type == "noul"]
    given = np.array([o.probs[0] for o in noul] if noul else p)
    return Summary(name=name, n=len(outcomes), accuracy=float(np.mean([o.correct for o in outcomes])),
                   brier=float(np.mean([o.brier for o in outcomes])), ece=ece(table), bins=table,
                   auc=auc(np.array([o.probs[0] for o in noul]), np.array([o.answer == 0 for o in noul])),
                   skill=brier_skill(outcomes), p10=float(np.percentile(given, 10)), p90=float(np.percentile(given, 90)))


def by_kind(outcomes: list[Outcome], bins: int = BINS) -> list[Summary]:
    """One summary per kind (in first-seen order), then one per tag ("tag straightforward", ...)
    when the items carry tags, then "overall"."""
    groups: dict[str, list[Outcome]] = defaultdict(list)
    tags: dict[str, list[Outcome]] = defaultdict(list)
    for o in outcomes:
        groups[o.kind].append(o)
        if o.tag:
            tags[f"tag {o.tag}"].append(o)
    rows = [summarize(kind, group, bins) for kind, group in groups.items()]
    rows += [summarize(tag, group, bins) for tag, group in tags.items()]
    return rows + [summarize("overall", outcomes, bins)]


def auc(p_yes: np.ndarray, is_yes: np.ndarray) -> float:
    """Area under the ROC curve of P(yes): how well the answers rank yes above no, whatever
    the calibration (0.5 = chance). Ties count one half."""
    pos, neg = np.asarray(p_yes)[np.asarray(is_yes, bool)], np.asarray(p_yes)[~np.asarray(is_yes, bool)]
    if not len(pos) or not len(neg):
        return float("nan")
    return float((pos[:, None] > neg[None, :]).mean() + 0.5 * (pos[:, None] == neg[None, :]).mean())
