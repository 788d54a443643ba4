"""Answer-quality tools (quality/): the metrics on hand-computed inputs, Platt fitting on
synthetic margins, the in-place profile rewrite, and `jevfleet eval` / `calibrate` end to end
on a few real items, in-process and through the real fleet (whose answers must be the same)."""
from __future__ import annotations

import dataclasses
import http.server
import json
import math
import shutil
import threading

import numpy as np
import pytest

from jevfleet.cli import main
from quality.calibration import fit_platt, write_calibration
from quality.evaluate import card, describe, make_report
from quality.items import Skipped, load_set
from quality.metrics import BINS, Outcome, auc, brier_skill, by_kind, summarize
from quality.remote import RemoteRunner
from shared.config import PROJECT_ROOT
from shared.profiles import load_profile

YESNO = PROJECT_ROOT / "eval" / "yesno.jsonl"
CHOICE_SCORE = PROJECT_ROOT / "eval" / "choice_score.jsonl"
GENERATED = PROJECT_ROOT / "eval" / "generated.jsonl"
PLAIN = PROJECT_ROOT / "eval" / "plain.jsonl"


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


def test_summaries_per_tag_come_after_the_kinds():
    tagged = [dataclasses.replace(noul(0.9, True, "a"), tag="straightforward"),
              dataclasses.replace(noul(0.8, False, "b"), tag="adversarial"),
              dataclasses.replace(noul(0.2, False, "a"), tag="straightforward")]
    rows = by_kind(tagged)
    assert [(r.name, r.n) for r in rows] == [("a", 2), ("b", 1), ("tag straightforward", 2), ("tag adversarial", 1),
                                             ("overall", 3)]


def test_the_quality_card_keeps_yes_no_and_choice_score_apart_per_tag_then_all():
    """The rows of docs/quality.md's cards, printed by `jevfleet eval` under the per-kind table."""
    picked = dataclasses.replace(noul(0.6, True, "c"), type="choice", probs=(0.6, 0.4), tag="adversarial")
    tagged = [dataclasses.replace(noul(0.9, True, "a"), tag="straightforward"),
              dataclasses.replace(noul(0.8, False, "b"), tag="adversarial"),
              dataclasses.replace(noul(0.2, False, "a"), tag="straightforward"), picked]
    rows = card(tagged)
    assert [(r.name, r.n) for r in rows] == [("yes/no straightforward", 2), ("yes/no adversarial", 1),
                                             ("choice/score adversarial", 1), ("yes/no all", 3),
                                             ("choice/score all", 1)]
    assert rows[0].auc == 1.0 and rows[2].auc != rows[2].auc  # no AUC for a choice
    assert "quality card" in describe(make_report("t", tagged)) and "quality card" not in describe(
        make_report("t", [noul(0.9, True, "a")]))


def test_brier_skill_is_against_the_base_rate_for_yes_no_and_uniform_for_choice():
    # yes/no: base rate 0.5, reference Brier 0.25; these answers' Brier (0.01 + 0.04) / 2 = 0.025
    assert brier_skill([noul(0.9, True), noul(0.2, False)]) == pytest.approx(1 - 0.025 / 0.25)
    assert brier_skill([noul(0.5, True), noul(0.5, False)]) == pytest.approx(0.0)
    assert brier_skill([noul(0.1, True), noul(0.9, False)]) < 0  # worse than answering the base rate
    # 3 yes of 4: the base rate's Brier is 0.75 · 0.25; answering 0.75 to every item has no skill
    assert brier_skill([noul(0.75, True)] * 3 + [noul(0.75, False)]) == pytest.approx(0.0)
    uniform = Outcome(id="c", kind="c", type="choice", probs=(1 / 3,) * 3, answer=1)
    assert brier_skill([uniform]) == pytest.approx(0.0)
    assert math.isnan(brier_skill([noul(0.9, True), noul(0.8, True)]))  # one answer only: no reference


def test_the_spread_is_the_p10_to_p90_range_of_the_answers():
    s = summarize("all", [noul(p / 10, p % 2 == 0) for p in range(11)])
    assert (s.p10, s.p90) == pytest.approx((0.1, 0.9)) and s.spread == pytest.approx(0.8)


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


def test_platt_never_turns_the_answers_around():
    """Margins that rank the answers the wrong way get scale 0 and the base rate, not a flip."""
    margins = np.array([-2.0, -1.0, 1.0, 2.0, -1.5, 0.5])
    labels = np.array([1, 1, 0, 0, 1, 0])
    scale, bias = fit_platt(margins, labels)
    assert scale == 0.0 and bias == pytest.approx(0.0)
    scale, _ = fit_platt(-margins, labels)
    assert scale > 0


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
    both = [i for i in load_set([YESNO, GENERATED]) if i.type == "noul"]
    assert len(both) >= 1000 and 0.45 < sum(i.split == "test" for i in both) / len(both) < 0.55
    generated = load_set(GENERATED)
    pairs = {}
    for i in generated:  # a templated scenario (its state) never sits on both sides
        pairs.setdefault(i.state, set()).add(i.split)
    assert all(len(splits) == 1 for splits in pairs.values())
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
    assert [s["name"] for s in summary["summaries"]] == ["fact", "choice", "score", "tag adversarial", "overall"]
    overall = summary["summaries"][-1]
    assert overall["n"] == 8 and 0 <= overall["brier"] <= 2 and not summary["skipped"]
    assert (local_report / "reliability.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    outcomes = [json.loads(line) for line in (local_report / "outcomes.jsonl").read_text().splitlines()]
    assert [isinstance(o["margin"], float) for o in outcomes] == [True] * 6 + [False] * 2
    assert all(sum(o["probs"]) == pytest.approx(1.0) for o in outcomes)
    assert "overall" in (local_report / "summary.txt").read_text()


def plain_rows(kind: str, n: int) -> str:
    """The first n yes/no items of one kind of eval/plain.jsonl (scenarios alternate fit/test)."""
    return "".join([x for x in PLAIN.read_text().splitlines(keepends=True) if f'"kind": "{kind}"' in x][:n])


def profile_copy(tmp_path):
    profile = tmp_path / "copy.toml"
    shutil.copy(PROJECT_ROOT / "conf" / "models" / "gemma-3-270m.toml", profile)
    return profile


@pytest.mark.model
def test_calibrate_fits_on_the_fit_split_and_rewrites_the_profile(tmp_path, capsys):
    small = tmp_path / "plain.jsonl"
    small.write_text(plain_rows("where", 40))
    profile = profile_copy(tmp_path)
    original = load_profile(str(profile))
    assert main(["calibrate", "--set", str(small), "--profile", str(profile), "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "test split, before" in out and "test split, after" in out and "tag straightforward" in out
    fitted = load_profile(str(profile))
    assert (fitted.scale, fitted.bias) != (original.scale, original.bias)
    assert (tmp_path / "after" / "reliability.png").exists()


@pytest.mark.model
def test_calibrate_refuses_a_fit_without_skill_and_leaves_the_profile(tmp_path, capsys):
    """Same-words pairs the model cannot read: the fit is a flat line, which calibrate refuses."""
    small = tmp_path / "pairs.jsonl"
    small.write_text("".join([x for x in GENERATED.read_text().splitlines(keepends=True)
                              if '"kind": "comparison"' in x][:24]))
    profile = profile_copy(tmp_path)
    before = profile.read_bytes()
    assert main(["calibrate", "--set", str(small), "--profile", str(profile)]) == 2
    assert "refused: the fit has Brier skill" in capsys.readouterr().err
    assert profile.read_bytes() == before


@pytest.mark.model
def test_calibrate_head_writes_a_head_that_eval_applies_bit_identically(tmp_path, capsys):
    """calibrate --head fits on the fit half and scores the test half from captured logit
    columns; eval --head on answers through the worker's readout: the same margins exactly.
    calibrate writes only a fit with skill, so the set is a kind the default model ranks well
    ("where", as above): on "topic"'s first 40 rows the margins' fit was flat on an Intel Xeon
    (2026-12-05), though it was not on the AMD EPYC of earlier runs (other kernels, other roundings)."""
    small = tmp_path / "where.jsonl"
    small.write_text(plain_rows("where", 40))
    profile = profile_copy(tmp_path)
    assert main(["calibrate", "--head", "--set", str(small), "--profile", str(profile), "--out", str(tmp_path / "cal")]) == 0
    assert "learned head" in capsys.readouterr().out
    assert (tmp_path / "copy.head.npz").exists() and load_profile(str(profile)).head == ""  # written, not enabled
    on = load_profile(str(profile), head=True)
    assert on.head == str(tmp_path / "copy.head.npz") and math.isfinite(on.scale)
    assert main(["eval", "--set", str(small), "--split", "test", "--head", "on", "--profile", str(profile),
                 "--out", str(tmp_path / "on")]) == 0

    def margins(path):
        return {o["id"]: o["margin"] for o in map(json.loads, path.read_text().splitlines())}

    fitted = margins(tmp_path / "cal" / "head" / "outcomes.jsonl")
    assert len(fitted) == 20 and margins(tmp_path / "on" / "outcomes.jsonl") == fitted
    assert margins(tmp_path / "cal" / "after" / "outcomes.jsonl") != fitted


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


def test_a_busy_server_is_retried_after_its_retry_after_whatever_its_form():
    """Other servers send Retry-After in lower case, as an HTTP date, or ask for an hour: the
    run neither crashes nor stalls (a real HTTP server on loopback answering 503)."""
    asked = iter(["2", "Wed, 21 Oct 2026 07:28:00 GMT", "3600", "-5"])

    class Busy(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            self.rfile.read(int(self.headers["Content-Length"]))
            self.send_response(503)
            self.send_header("retry-after", next(asked))
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"{}")

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Busy)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        runner = RemoteRunner(f"http://127.0.0.1:{server.server_port}")
        waits = [runner._post({})[2] for _ in range(4)]
    finally:
        server.shutdown()
    assert waits == [2.0, 1.0, 30.0, 0.0]  # as asked; a date reads as absent (1 s); capped; never negative
