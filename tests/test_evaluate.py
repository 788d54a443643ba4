"""Answer-quality tools (quality/): the metrics on hand-computed inputs, Platt fitting on
synthetic margins, the in-place profile rewrite, and `jevfleet eval` / `calibrate` end to end
on a few real items, in-process and through the real fleet (whose answers must be the same)."""
from __future__ import annotations

import dataclasses
import json
import shutil

import numpy as np
import pytest

from jevfleet.cli import main
from quality.calibration import fit_platt, write_calibration
from quality.items import Skipped, load_set
from quality.metrics import BINS, Outcome, auc, by_kind, summarize
from quality.remote import RemoteRunner
from shared.config import PROJECT_ROOT
from shared.profiles import load_profile

YESNO = PROJECT_ROOT / "eval" / "yesno.jsonl"
CHOICE_SCORE = PROJECT_ROOT / "eval" / "choice_score.jsonl"


def noul(p: float, yes: bool, kind: str = "k") -> Outcome:
    return Outcome(id=f"{kind}-{p}-{yes}", kind=kind, type="noul", probs=(p, 1 - p), answer=0 if yes else 1)


# --- metrics ------------------------------------------------------------------------------

def test_accuracy_brier_and_ece_of_yes_no_forecasts():
    s = summarize("all", [noul(0.9, True), noul(0.2, False), noul(0.6, False), noul(0.4, True)])
    assert s.n == 4
    assert s.accuracy == 0.5  # 0.9→yes ✓, 0.2→no ✓, 0.6→yes ✗, 0.4→no ✗
    assert s.brier == pytest.approx((0.01 + 0.04 + 0.36 + 0.36) / 4)
    assert s.ece == pytest.approx((0.1 + 0.2 + 0.6 + 0.6) / 4)  # each forecast alone in its bin


def test_ece_pools_forecasts_that_share_a_bin():
    # 0.10 and 0.12 share bin [1/15, 2/15); one was yes: |0.11 − 0.5| for half the items.
    # 0.95 is alone in the last bin and right: |0.95 − 1|.  0.5 alone: |0.5 − 0|.
    s = summarize("all", [noul(0.10, True), noul(0.12, False), noul(0.95, True), noul(0.5, False)])
    assert len(s.bins) == BINS == 15
    assert [b.count for b in s.bins if b.count] == [2, 1, 1]
    assert s.ece == pytest.approx(0.5 * 0.39 + 0.25 * 0.05 + 0.25 * 0.5)


def test_bin_edges_zero_and_one_fall_into_the_outer_bins():
    s = summarize("all", [noul(0.0, False), noul(1.0, True), noul(1 / 15, True)])
    assert s.bins[0].count == 1 and s.bins[-1].count == 1 and s.bins[1].count == 1
    assert s.ece == pytest.approx((1 - 1 / 15) / 3)  # only the 1/15 forecast is off (it was a yes)


def test_choice_is_scored_on_the_whole_distribution_and_its_top_option():
    right = Outcome(id="c1", kind="choice", type="choice", probs=(0.7, 0.2, 0.1), answer=0)
    wrong = Outcome(id="c2", kind="choice", type="choice", probs=(0.5, 0.3, 0.2), answer=2)
    s = summarize("choice", [right, wrong])
    assert s.accuracy == 0.5
    assert s.brier == pytest.approx(((0.09 + 0.04 + 0.01) + (0.25 + 0.09 + 0.64)) / 2)
    assert right.event() == (0.7, True) and wrong.event() == (0.5, False)
    assert s.ece == pytest.approx(0.5 * 0.3 + 0.5 * 0.5)


def test_summaries_per_kind_then_overall():
    rows = by_kind([noul(0.9, True, "a"), noul(0.8, False, "b"), noul(0.3, False, "a")])
    assert [(r.name, r.n) for r in rows] == [("a", 2), ("b", 1), ("overall", 3)]
    assert rows[0].accuracy == 1.0 and rows[1].accuracy == 0.0


def test_auc_counts_pairs_ranked_right_and_ties_as_half():
    assert auc(np.array([0.9, 0.8, 0.1, 0.2]), np.array([1, 1, 0, 0])) == 1.0
    assert auc(np.array([0.5, 0.5]), np.array([1, 0])) == 0.5


# --- calibration fitting and the profile rewrite ------------------------------------------

def test_platt_fit_recovers_a_known_scale_and_bias():
    rng = np.random.default_rng(7)
    margins = rng.normal(0.0, 2.0, 20_000)
    labels = rng.random(margins.size) < 1 / (1 + np.exp(-(1.7 * margins - 0.4)))
    scale, bias = fit_platt(margins, labels)
    assert scale == pytest.approx(1.7, abs=0.08)
    assert bias == pytest.approx(-0.4, abs=0.08)


def test_platt_fit_stays_finite_on_separable_data_and_refuses_one_class():
    scale, bias = fit_platt(np.array([-1.0, -0.5, 0.5, 1.0]), np.array([0, 0, 1, 1]))
    assert 0 < scale < 10 and abs(bias) < 1
    with pytest.raises(ValueError, match="both answers"):
        fit_platt(np.array([0.1, 0.2]), np.array([1, 1]))


def test_profile_rewrite_changes_only_the_two_numbers(tmp_path):
    path = tmp_path / "p.toml"
    shutil.copy(PROJECT_ROOT / "conf" / "models" / "gemma-3-270m.toml", path)
    before = path.read_text().splitlines()
    write_calibration(path, 0.4321, -0.0987)
    after = path.read_text().splitlines()
    assert len(after) == len(before)
    changed = [(a, b) for a, b in zip(before, after) if a != b]
    assert [b for _, b in changed] == ["scale = 0.4321", "bias = -0.0987"], changed
    profile = load_profile(str(path))
    assert (profile.scale, profile.bias) == (0.4321, -0.0987)
    assert profile.preamble == load_profile("gemma-3-270m").preamble


def test_profile_rewrite_adds_a_missing_calibration_section(tmp_path):
    path = tmp_path / "p.toml"
    text = (PROJECT_ROOT / "conf" / "models" / "gemma-3-270m.toml").read_text()
    path.write_text(text[: text.index("[calibration]")].rstrip() + "  # no calibration yet")
    write_calibration(path, 2.0, 0.5)
    assert path.read_text().startswith(text[: text.index("[calibration]")].rstrip() + "  # no calibration yet\n")
    assert (load_profile(str(path)).scale, load_profile(str(path)).bias) == (2.0, 0.5)


def test_set_loading_checks_answers_and_splits(tmp_path):
    assert len(load_set(YESNO)) == 360 and len(load_set(YESNO, "test")) == 180
    assert {i.type for i in load_set(CHOICE_SCORE)} == {"choice", "score"}
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"id": "x", "type": "choice", "state": "s", "instructions": "i",
                               "criteria": {"a": None, "b": None}, "answer": "c"}) + "\n")
    with pytest.raises(ValueError, match="bad.jsonl:1"):
        load_set(bad)


# --- end to end on the real model ---------------------------------------------------------

@pytest.fixture(scope="module")
def small_set(tmp_path_factory):
    """The first six yes/no items (three fit, three test, both answers in each half), one
    choice and one score item."""
    path = tmp_path_factory.mktemp("set") / "small.jsonl"
    lines = YESNO.read_text().splitlines(keepends=True)[:6]
    cs = CHOICE_SCORE.read_text().splitlines(keepends=True)
    lines += [next(x for x in cs if '"choice"' in x), next(x for x in cs if '"score"' in x)]
    path.write_text("".join(lines))
    return path


@pytest.fixture(scope="module")
def local_report(small_set, tmp_path_factory):
    out = tmp_path_factory.mktemp("local")
    assert main(["eval", "--set", str(small_set), "--out", str(out)]) == 0
    return out


@pytest.mark.model
def test_eval_in_process_writes_the_report_and_png(local_report):
    summary = json.loads((local_report / "summary.json").read_text())
    assert [s["name"] for s in summary["summaries"]] == ["fact", "choice", "score", "overall"]
    overall = summary["summaries"][-1]
    assert overall["n"] == 8 and 0 <= overall["brier"] <= 2 and not summary["skipped"]
    assert (local_report / "reliability.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    outcomes = [json.loads(line) for line in (local_report / "outcomes.jsonl").read_text().splitlines()]
    assert [isinstance(o["margin"], float) for o in outcomes] == [True] * 6 + [False] * 2
    assert all(sum(o["probs"]) == pytest.approx(1.0) for o in outcomes)
    assert "overall" in (local_report / "summary.txt").read_text()


@pytest.mark.model
def test_calibrate_fits_on_the_fit_half_and_rewrites_the_profile(small_set, tmp_path, capsys):
    profile = tmp_path / "copy.toml"
    shutil.copy(PROJECT_ROOT / "conf" / "models" / "gemma-3-270m.toml", profile)
    original = load_profile(str(profile))
    assert main(["calibrate", "--set", str(small_set), "--profile", str(profile), "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "test half, before" in out and "test half, after" in out
    fitted = load_profile(str(profile))
    assert (fitted.scale, fitted.bias) != (original.scale, original.bias)
    assert (tmp_path / "after" / "reliability.png").exists()


@pytest.mark.fleet
def test_eval_through_the_server_matches_in_process(fleet, small_set, local_report, tmp_path):
    assert main(["eval", "--set", str(small_set), "--url", fleet.url, "--out", str(tmp_path)]) == 0
    local = [json.loads(x)["probs"] for x in (local_report / "outcomes.jsonl").read_text().splitlines()]
    remote = [json.loads(x)["probs"] for x in (tmp_path / "outcomes.jsonl").read_text().splitlines()]
    assert remote == local  # deterministic mode: the same probabilities on either path


def test_items_the_server_refuses_are_skipped_with_its_reason(tmp_path):
    item = load_set(YESNO)[0]
    refused = dataclasses.replace(item, state="   ")  # a blank state is a 422
    runner = RemoteRunner("http://127.0.0.1:9")  # never reached: nothing listens on port 9
    runner._post = lambda body: (422, {"detail": [{"msg": "State must not be empty"}]}, 0.0)
    (result,) = runner.ask([refused])
    assert isinstance(result, Skipped) and result.reason.startswith("HTTP 422") and "empty" in result.reason
