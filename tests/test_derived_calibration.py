"""The calibration a derived profile is served with (quality/derived.py): fitted once on the
built-in set where it is first served, recorded by model file, prompt, set and llama.cpp build,
read back by every gateway, flat where the margins rank no better than chance."""
from __future__ import annotations

import json

import numpy as np
import pytest

import quality.derived
import shared.derive
from jevfleet.harness.engine import model_of
from quality.calibration import fit_platt, flat_bias
from quality.derived import calibrated_serving_profile, cross_validated_skill
from shared.config import default_settings, replace
from shared.derive import calibration_record, derive_profile, render_profile, serving_profile

PAIRS = [str(k // 2) for k in range(400)]  # 200 scenarios: a yes item and a no item each
LABELS = np.array([True, False] * 200)


# --- no model needed ---

def test_margins_that_rank_the_answers_have_two_fold_skill_and_margins_that_cannot_tell_have_none():
    rng = np.random.default_rng(7)
    assert cross_validated_skill(rng.normal(size=400) + 1.5 * LABELS, LABELS, PAIRS) > 0.1
    blind = np.repeat(rng.normal(size=200), 2)  # each scenario's yes and no text get the same margin
    assert cross_validated_skill(blind, LABELS, PAIRS) <= 0
    assert cross_validated_skill(rng.normal(size=400) - 1.5 * LABELS, LABELS, PAIRS) <= 0  # the wrong way round


def test_groups_keep_a_scenario_on_one_side_so_a_fold_never_lacks_an_answer():
    """Grouped by item, the alternating yes/no items would put every yes in one fold: no fit there."""
    margins = np.random.default_rng(3).normal(size=400) + LABELS
    assert cross_validated_skill(margins, LABELS, [str(k) for k in range(400)]) == -np.inf
    assert np.isfinite(cross_validated_skill(margins, LABELS, PAIRS))


def test_the_flat_calibration_answers_the_base_rate_of_the_fit():
    labels = np.array([True, True, True, False])
    base = 1 / (1 + np.exp(-flat_bias(labels)))
    assert base == pytest.approx(np.mean([4 / 5, 4 / 5, 4 / 5, 1 / 3]))
    assert fit_platt(np.arange(4.0), labels) == (0.0, flat_bias(labels))  # ranked the wrong way: flat


def test_a_costlier_file_is_fitted_on_fewer_whole_scenarios_of_every_kind():
    from collections import Counter

    from quality.items import load_set

    items = [i for i in load_set(shared.derive.CALIBRATION_SET, "fit") if i.type == "noul" and i.tag == quality.derived.TAG]
    size, mib = shared.derive.calibration_size, 2**20
    most = size(463 * mib, 30.0)  # Gemma 3 1B at Q4_K_M: its layers' bytes, the tokens of an item
    assert 130 < most < 160 and size(65 * mib, 32) > len(items)  # SmolLM2 135M: every item
    assert size(463 * mib, 33.0) < most  # more tokens an item, fewer items
    assert size(565 * mib, 29.4) == size(713 * mib, 58.2) == shared.derive.CALIBRATION_MIN  # Llama 3.2 1B, MiniCPM 1B
    picked = quality.derived.spread(items, most)
    assert most - 40 <= len(picked) <= most and quality.derived.spread(items, 10_000) == items
    scenarios = Counter(repr((i.kind, i.question)) for i in items)
    assert all(n == scenarios[repr((i.kind, i.question))] for i in picked  # whole scenarios only
               for n in [sum(j.kind == i.kind and j.question == i.question for j in picked)])
    assert {i.kind for i in picked} == {i.kind for i in items}
    assert sum(i.answer == 0 for i in picked) == len(picked) // 2
    fewest = quality.derived.spread(items, shared.derive.CALIBRATION_MIN)  # Llama 3.2 1B and every larger file here
    shares = Counter(i.kind for i in fewest)
    assert len(fewest) == shared.derive.CALIBRATION_MIN and set(shares) == {i.kind for i in items}
    assert max(shares.values()) <= 2 * min(shares.values())  # no kind left with a token share


# --- the model ---

@pytest.fixture
def small_set(tmp_path, monkeypatch):
    """24 fit items of the built-in set (12 scenarios), so that a fit takes seconds."""
    lines = [line for line in shared.derive.CALIBRATION_SET.read_text().splitlines() if '"split": "fit"' in line
             and '"tag": "straightforward"' in line]
    path = tmp_path / "plain.jsonl"
    path.write_text("\n".join(lines[:24]) + "\n")
    monkeypatch.setattr(shared.derive, "CALIBRATION_SET", path)
    monkeypatch.setattr(quality.derived, "CALIBRATION_SET", path)
    return path


@pytest.mark.model
def test_the_first_serve_fits_and_records_it_and_every_gateway_reads_the_same_numbers(tmp_path, small_set,
                                                                                    monkeypatch, capsys):
    smollm2 = model_of(default_settings(), "smollm2-135m")[1]
    settings = replace(default_settings(), model=str(smollm2), cache_dir=str(tmp_path / "cache"), threads=2)
    fitted = calibrated_serving_profile(settings)
    record = calibration_record(settings.cache_path, derive_profile(smollm2))
    assert fitted.calibration_record == str(record) and record.is_file()
    kept = json.loads(record.read_text())
    assert (fitted.scale, fitted.bias) == (kept["scale"], kept["bias"]) and kept["items"] == 24
    # what the count was cut by: the layers (the file less its 49k-token embeddings), an item's tokens
    assert 40 < kept["layer_mib"] < smollm2.stat().st_size / 2**20 - 20 and 15 < kept["item_tokens"] < 80
    assert "calibrating" in capsys.readouterr().err  # progress on stderr
    # a gateway (no model loaded) reads the record; a second serve fits nothing
    assert serving_profile(settings) == fitted
    rendered = render_profile(fitted, settings.cache_path)  # as serve hands it to its gateway and workers
    assert serving_profile(replace(settings, profile=str(rendered))) == fitted
    monkeypatch.setattr(quality.derived, "LocalRunner", None)  # would raise if a fit were tried
    assert calibrated_serving_profile(settings) == fitted
    # another set is another record: the one kept for the old set is never read for it
    small_set.write_text(small_set.read_text().replace("Ticket", "Message", 1))
    assert calibration_record(settings.cache_path, derive_profile(smollm2)) != record
    assert serving_profile(settings).calibration_record == ""


@pytest.mark.model
def test_with_derived_calibration_off_it_is_served_uncalibrated_and_says_so(tmp_path, small_set, capsys):
    smollm2 = model_of(default_settings(), "smollm2-135m")[1]
    settings = replace(default_settings(), model=str(smollm2), cache_dir=str(tmp_path), derived_calibration=0)
    profile = calibrated_serving_profile(settings)
    assert (profile.scale, profile.bias, profile.calibration_record) == (1.0, 0.0, "")
    assert "served uncalibrated (derived_calibration is 0)" in capsys.readouterr().err
    assert not (tmp_path / "calibration").exists()


@pytest.mark.model
def test_a_model_the_start_up_canary_refuses_stops_the_first_serve_with_one_line(tmp_path, small_set, monkeypatch):
    """As `jevfleet serve` meets it: the model thread's load raised, its waiter wraps that; the CLI
    prints a ProfileError as one line and exits 2."""
    from shared.profiles import ProfileError
    from worker.canary import CanaryError

    def refused(*_args, **_kwargs):
        try:
            raise CanaryError("start-up canary: the readout does not fit this model or build")
        except CanaryError as exc:
            raise RuntimeError(f"loading the model failed: {exc!r}") from exc

    smollm2 = model_of(default_settings(), "smollm2-135m")[1]
    settings = replace(default_settings(), model=str(smollm2), cache_dir=str(tmp_path))
    monkeypatch.setattr(quality.derived, "LocalRunner", refused)
    with pytest.raises(ProfileError) as refusal:
        calibrated_serving_profile(settings)
    assert str(refusal.value) == (f"the profile derived from {smollm2.name} cannot be calibrated: start-up canary: "
                                  "the readout does not fit this model or build")
    assert not calibration_record(settings.cache_path, derive_profile(smollm2)).is_file()
