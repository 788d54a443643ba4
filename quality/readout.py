"""Ways of reading a yes/no answer out of one forward pass, measured side by side.

The worker reads a margin from the final hidden state h (worker/hidden.py, worker/head.py):
logsumexp of the yes tokens' logits minus logsumexp of the no tokens', each logit W[id]·h with h
rounded as ggml rounds it. llama.cpp's own server would instead finish the output matmul and
read its logits row. Here every item of a labelled set is answered once with llama.cpp let
finish that matmul (HiddenTap.full_logits), and both are kept at a fixed set of candidate answer
tokens, so each reading below is computed from the same pass:

- token sets: " Yes" / " No" alone, with the lowercase " yes" / " no", and with the forms
  without the leading space ("Yes", "yes" / "No", "no") too; from h (ours) and from llama.cpp's row;
- the full-vocabulary softmax's P(" Yes") (probability mass, not renormalised over yes and no).

A two-way softmax over one yes and one no token is sigmoid(yes − no): it ranks exactly as that
margin, so the margin rows are also the "plain Yes/No softmax" rows.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from quality.items import Item
from quality.local import LocalRunner
from quality.metrics import auc
from worker.head import yes_no_margin

YES_FORMS = (" Yes", " yes", "Yes", "yes")
NO_FORMS = (" No", " no", "No", "no")
TOKEN_SETS = {  # name -> (yes forms, no forms)
    '" Yes" / " No"': ((" Yes",), (" No",)),
    '+ " yes" / " no"': ((" Yes", " yes"), (" No", " no")),
    '+ "Yes" "yes" / "No" "no"': (YES_FORMS, NO_FORMS),
    '"Yes" / "No" (no space)': (("Yes",), ("No",)),
}


@dataclass(frozen=True)
class Reading:
    """One item's candidate answer logits, from h (ours) and from llama.cpp's row (full)."""

    id: str
    tag: str
    split: str
    yes: bool
    ours: dict[str, float]  # form -> logit
    full: dict[str, float]
    full_lse: float  # logsumexp of llama.cpp's whole row
    margin: float  # the margin the worker served (its profile's tokens)


def candidate_ids(runner: LocalRunner) -> dict[str, int]:
    """The candidate forms that are one token of this model's vocabulary, with their ids."""
    ids = {}
    for form in YES_FORMS + NO_FORMS:
        tokens = runner.engine.tokenize(form)
        if len(tokens) == 1:
            ids[form] = tokens[0]
    return ids


def collect(runner: LocalRunner, items: list[Item], ask) -> list[Reading]:
    """Answer the yes/no items with llama.cpp finishing its output matmul, capturing the
    candidates both ways. `ask` is quality.evaluate.ask_all (progress bar) or a quiet variant."""
    forms = candidate_ids(runner)
    runner.engine.readout.capture = np.array(list(forms.values()), dtype=np.int64)
    runner.engine.tap.full_logits = True
    try:
        outcomes, skipped = ask(runner, [i for i in items if i.type == "noul"])
    finally:
        runner.engine.tap.full_logits = False
        runner.engine.readout.capture = None
    if skipped:
        raise RuntimeError(f"{len(skipped)} item(s) refused, e.g. {skipped[0].id}: {skipped[0].reason}")
    by_id = {i.id: i for i in items}
    readings = []
    for o in outcomes:
        full, lse = runner.reference[o.id]
        ours = runner.features[o.id]
        item = by_id[o.id]
        readings.append(Reading(o.id, item.tag, item.split, bool(item.answer), dict(zip(forms, map(float, ours))),
                                dict(zip(forms, map(float, full))), float(lse), float(o.margin)))
    return readings


def margin(logits: dict[str, float], yes: tuple[str, ...], no: tuple[str, ...]) -> float:
    """logsumexp(yes) − logsumexp(no) over the forms this vocabulary has as one token."""
    ys, ns = [f for f in yes if f in logits], [f for f in no if f in logits]
    return yes_no_margin(logits.__getitem__, ys, ns) if ys and ns else math.nan


def scores(readings: list[Reading]) -> dict[str, np.ndarray]:
    """Each way of reading, as one score per reading (higher = more yes)."""
    out: dict[str, np.ndarray] = {}
    for name, (yes, no) in TOKEN_SETS.items():
        out[f"{name}, from h (ours)"] = np.array([margin(r.ours, yes, no) for r in readings])
        out[f"{name}, llama.cpp row"] = np.array([margin(r.full, yes, no) for r in readings])
    out['P(" Yes") of the full softmax'] = np.array([math.exp(r.full.get(" Yes", math.nan) - r.full_lse)
                                                      for r in readings])
    out["served margin (profile tokens)"] = np.array([r.margin for r in readings])
    return out


def groups(readings: list[Reading]) -> dict[str, np.ndarray]:
    """Masks of the groups a table reports: split × tag, and each split overall."""
    masks: dict[str, np.ndarray] = {}
    for split in ("fit", "test"):
        in_split = np.array([r.split == split for r in readings])
        for tag in sorted({r.tag for r in readings}):
            masks[f"{split} {tag or 'untagged'}"] = in_split & np.array([r.tag == tag for r in readings])
        masks[f"{split} all"] = in_split
    return {k: m for k, m in masks.items() if m.any()}


def auc_table(readings: list[Reading]) -> tuple[list[str], dict[str, list[float]]]:
    """(group names, {reading: AUC per group}); nan where a reading has no value."""
    yes = np.array([r.yes for r in readings])
    masks = groups(readings)
    table = {}
    for name, score in scores(readings).items():
        table[name] = [auc(score[m], yes[m]) if np.isfinite(score[m]).all() else math.nan for m in masks.values()]
    return list(masks), table


def agreement(readings: list[Reading]) -> dict[str, float]:
    """How far the hidden-state path is from llama.cpp's row: the largest difference of one
    candidate logit, of the served token set's margin, and how many margins change sign."""
    col = max(abs(r.ours[f] - r.full[f]) for r in readings for f in r.ours)
    yes, no = TOKEN_SETS['+ " yes" / " no"']
    diffs = [margin(r.ours, yes, no) - margin(r.full, yes, no) for r in readings]
    flips = sum((margin(r.ours, yes, no) > 0) != (margin(r.full, yes, no) > 0) for r in readings)
    return {"items": len(readings), "max_logit_diff": col, "max_margin_diff": max(map(abs, diffs)),
            "sign_changes": flips}


def describe(readings: list[Reading]) -> str:
    names, table = auc_table(readings)
    width = max(map(len, table)) + 1
    lines = [f"{'reading':<{width}}" + "".join(f"{n:>24}" for n in names)]
    for name, row in table.items():
        lines.append(f"{name:<{width}}" + "".join(f"{v:>24.3f}" for v in row))
    a = agreement(readings)
    lines.append(f"\nhidden-state path vs llama.cpp's logits row over {a['items']} prompts: largest difference of a "
                 f"candidate logit {a['max_logit_diff']:.2e}, of the margin {a['max_margin_diff']:.2e}; "
                 f"{a['sign_changes']} margin(s) change sign")
    return "\n".join(lines)
