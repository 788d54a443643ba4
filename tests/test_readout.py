"""quality/readout.py: the readings computed from captured logits (no model), and on the real
default model over 1,000 prompts of the evaluation set, the worker's hidden-state path against
llama.cpp's own full logits row."""
from __future__ import annotations

import math

import numpy as np
import pytest

from jevfleet.cli import QUALITY_SETS
from quality.evaluate import ask_all
from quality.items import load_set
from quality.local import LocalRunner
from quality.readout import Reading, agreement, auc_table, collect, margin, scores
from shared.config import load_settings
# A logit from h against llama.cpp's on this Q8_0 file, absolute: measured up to 6.8e-3 (logits up
# to ~20; the canary's bound is relative, worker/canary.TOLERANCE)
TOLERANCE = 0.01

PROMPTS = 1000


def reading(yes: bool, ours: dict[str, float], split: str = "test", tag: str = "straightforward") -> Reading:
    return Reading(id=str(id(ours)), tag=tag, split=split, yes=yes, ours=ours, full=dict(ours),
                   full_lse=max(ours.values()) + 10.0, margin=ours[" Yes"] - ours[" No"])


def test_a_margin_is_logsumexp_of_the_yes_forms_minus_the_no_forms():
    logits = {" Yes": 2.0, " yes": 1.0, " No": 0.5, " no": -1.0}
    assert margin(logits, (" Yes",), (" No",)) == pytest.approx(1.5)
    assert margin(logits, (" Yes", " yes"), (" No", " no")) == pytest.approx(
        math.log(math.exp(2) + math.exp(1)) - math.log(math.exp(0.5) + math.exp(-1)))
    assert math.isnan(margin(logits, ("Yes",), ("No",)))  # forms the vocabulary lacks as one token


def test_each_reading_is_ranked_per_split_and_tag():
    readings = [reading(True, {" Yes": 3.0, " No": 0.0}), reading(False, {" Yes": 0.0, " No": 2.0}),
                reading(True, {" Yes": 0.0, " No": 1.0}, split="fit"), reading(False, {" Yes": 1.0, " No": 0.0}, "fit")]
    names, table = auc_table(readings)
    assert names == ["fit straightforward", "fit all", "test straightforward", "test all"]
    assert table['" Yes" / " No", from h (ours)'] == [0.0, 0.0, 1.0, 1.0]
    assert math.isnan(table['"Yes" / "No" (no space), from h (ours)'][0])
    assert set(scores(readings)) == set(table)


@pytest.mark.model
def test_the_hidden_state_path_equals_llama_cpps_logits_row_on_1000_prompts():
    """Every candidate answer logit the worker computes from h, over 1,000 prompts of the test
    split, against the row llama.cpp computes when it finishes its output matmul."""
    items = sorted((i for i in load_set(list(QUALITY_SETS), "test") if i.type == "noul"), key=lambda i: i.id)
    items = items[:: max(1, len(items) // PROMPTS)][:PROMPTS]
    runner = LocalRunner(load_settings({}))
    yes, no = runner.profile.yes, runner.profile.no
    try:
        readings = collect(runner, items, lambda r, its: ask_all(r, its, quiet=True))
    finally:
        runner.close()
    found = agreement(readings)
    assert found["items"] == PROMPTS and {r.tag for r in readings} == {"straightforward", "adversarial"}
    assert found["max_logit_diff"] < TOLERANCE
    served = np.array([r.margin for r in readings])  # the margin the worker answered with
    assert np.abs(served - [margin(r.full, yes, no) for r in readings]).max() < 2 * TOLERANCE
