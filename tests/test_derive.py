"""Profiles derived from a GGUF file (shared/derive.py): what `serve --model PATH` serves without a
profile, `jevfleet profile PATH` prints, and every file it refuses, each refusal one line and
exit 2. The bad files are real GGUFs written with the gguf package: SmolLM2's header (its
vocabulary and hyperparameters, no tensors, which a vocab-only load does not read) with one thing
changed."""
from __future__ import annotations

import dataclasses
import logging
import tomllib
from functools import lru_cache
from pathlib import Path

import gguf
import pytest

from jevfleet.cli import main
from jevfleet.harness.engine import model_of
from shared.config import default_settings
from shared.derive import (FEW_SHOT, SYSTEM, boundary_holds, derive_data, derive_profile, profile_for,
                            render_profile)
from shared.gguf_file import read_gguf
from shared.profile_file import profile_toml
from shared.profiles import Profile, load_profile
from tests.tiers import SMALL_PROFILE
from worker.sanity import PAIRS, check_sanity, share_right

PROMPT_KEYS = ("control", "preamble", "prefix", "suffix", "yes", "no", "default_question", "choice_question",
               "score_question", "option_described", "true_means", "false_means")


def one_line_refusal(capsys, argv: list[str]) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err
    return err


# --- no model needed ---

def test_a_file_that_is_not_a_gguf_is_refused(tmp_path, capsys):
    path = tmp_path / "weights.gguf"
    path.write_bytes(b"PK\x03\x04 a zip file named .gguf")
    assert "not a GGUF file" in one_line_refusal(capsys, ["profile", str(path)])
    assert "not a GGUF file" in one_line_refusal(capsys, ["serve", "--model", str(path), "--run-dir", str(tmp_path)])


def test_a_named_profile_takes_precedence_over_the_file(tmp_path):
    """--profile with --model: the hand-written profile, its model replaced, the file never derived."""
    profile = profile_for("smollm2-135m", "/nonexistent/any.gguf", cache_dir=tmp_path, default=SMALL_PROFILE)
    assert profile == load_profile("smollm2-135m") and not profile.derived
    assert profile_for("", "", cache_dir=tmp_path, default=SMALL_PROFILE) == load_profile(SMALL_PROFILE)  # neither


def test_the_toml_written_reads_back_as_the_same_data():
    data = {"name": 'a "quoted" \\ name', "licence": "x\x01\x7f", "model": {"add_bos": False},
            "prompt": {"preamble": 'two\nlines with """ and \\n\r\n', "yes": [" Yes", "yes"]},
            "calibration": {"scale": 1.0, "bias": -0.25}}
    assert tomllib.loads(profile_toml(data, "a header\nof two lines")) == data


def derived_like(tmp_path: Path, **changes) -> Profile:
    """A profile as derive_profile gives it and serving_profile calibrates it, without reading a
    vocabulary: SmolLM2's hand-written chat profile (control tokens, a preamble of many lines)
    marked derived from a GGUF in tmp_path."""
    gguf_file = tmp_path / "mine.gguf"
    gguf_file.write_bytes(b"GGUF stand-in")
    return dataclasses.replace(load_profile("smollm2-135m"), name="mine", path=str(gguf_file), source=gguf_file,
                               derived=True, **changes)


def test_a_rendered_derived_profile_loads_back_as_the_same_profile_with_its_calibration(tmp_path):
    """What serve hands its children: the file loads as the derived profile it was, its GGUF still its
    source (the serving facts' digest, the calibration record's key) and its calibration kept."""
    cache = tmp_path / "cache"
    calibrated = derived_like(tmp_path, scale=0.8125, bias=-0.3, calibration_record=str(cache / "calibration/x.json"))
    path = render_profile(calibrated, cache)
    assert path.parent == cache / "profiles" and path.name.startswith("mine-") and path.suffix == ".toml"
    loaded = load_profile(str(path))
    assert loaded == calibrated and loaded.derived and loaded.source == tmp_path / "mine.gguf"
    assert profile_for(str(path), calibrated.path, cache_dir=cache, default=SMALL_PROFILE) == calibrated  # as a child reads it
    assert render_profile(calibrated, cache) == path  # named by content: the same profile, the same file
    uncalibrated = dataclasses.replace(calibrated, scale=1.0, bias=0.0, calibration_record="")
    assert render_profile(uncalibrated, cache) != path and load_profile(str(render_profile(uncalibrated, cache))) \
        == uncalibrated
    assert sorted(p.name for p in (cache / "profiles").iterdir()) == sorted(  # nothing half-written left
        [path.name, render_profile(uncalibrated, cache).name])


def test_only_a_derived_profile_is_rendered(tmp_path):
    with pytest.raises(ValueError, match="only a derived profile"):
        render_profile(load_profile("smollm2-135m"), tmp_path)
    with pytest.raises(ValueError, match="only a derived profile"):  # a head's file would not go with it
        render_profile(derived_like(tmp_path, head=str(tmp_path / "mine.head.npz")), tmp_path)


def test_the_sanity_figure_compares_each_question_with_itself_and_counts_ties_as_half():
    assert share_right([2.0, -3.0], [0.0, -4.0]) == 1.0  # the second question's bias does not count
    assert share_right([0.0], [1.0]) == 0.0
    assert share_right([1.0, 1.0], [1.0, 0.0]) == 0.75


# --- the real files ---

@pytest.fixture(scope="module")
def smollm2() -> Path:
    return model_of(default_settings(), "smollm2-135m")[1]


@pytest.fixture(scope="module")
def gemma() -> Path:
    return model_of(default_settings())[1]


@lru_cache(maxsize=2)
def header(path: Path) -> gguf.GGUFReader:
    return gguf.GGUFReader(path)  # ~2 s for SmolLM2's 49,152 tokens: read once


def copy_header(src: Path, dst: Path, changes: dict, arch: str = "") -> Path:
    """dst: src's metadata with `changes` (key -> value) and no tensors."""
    reader = header(src)
    writer = gguf.GGUFWriter(dst, arch or reader.fields["general.architecture"].contents())
    for name, field in reader.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture":
            continue
        value = changes.get(name, field.contents())
        is_array = field.types[0] == gguf.GGUFValueType.ARRAY
        writer.add_key_value(name, value, field.types[0], sub_type=field.types[-1] if is_array else None)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return dst


@pytest.mark.model
def test_smollm2s_file_alone_gives_the_hand_written_chat_profile(smollm2, tmp_path):
    """Its chat template, rendered, cut and checked, is the prompt written by hand for it."""
    derived, written = derive_profile(smollm2), load_profile("smollm2-135m")
    assert derived.derived and derived.source == smollm2
    assert {k: getattr(derived, k) for k in PROMPT_KEYS} == {k: getattr(written, k) for k in PROMPT_KEYS}
    assert derived.add_bos == written.add_bos is False
    assert profile_for("", str(smollm2), cache_dir=tmp_path, default=SMALL_PROFILE) == derived  # serve --model, nothing calibrated


@pytest.mark.model
def test_gemmas_file_alone_falls_back_to_the_few_shot_profile(gemma):
    """A base model (no chat template): the few-shot prompt, uncalibrated."""
    derived, few_shot = derive_profile(gemma), load_profile(FEW_SHOT)
    assert {k: getattr(derived, k) for k in PROMPT_KEYS} == {k: getattr(few_shot, k) for k in PROMPT_KEYS}
    assert derived.add_bos and (derived.scale, derived.bias) == (1.0, 0.0)


@pytest.mark.model
def test_the_printed_profile_serves_as_a_profile_file(smollm2, tmp_path, capsys):
    assert main(["profile", str(smollm2)]) == 0
    path = tmp_path / "mine.toml"
    path.write_text(capsys.readouterr().out)
    written, derived = load_profile(str(path)), derive_profile(smollm2)
    assert written == dataclasses.replace(derived, source=path, derived=False)
    assert derive_data(smollm2) == tomllib.loads(path.read_text())


@pytest.mark.model
def test_a_template_without_a_system_role_and_with_todays_date_renders_the_same_every_day(smollm2, tmp_path):
    """Gemma-style templates raise on a system turn: its text goes into the first user turn. A
    template that prints strftime_now's date gets a fixed one, or gateway and workers started on
    different days would disagree on the preamble."""
    template = header(smollm2).fields["tokenizer.chat_template"].contents()
    picky = ("{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}"
             "{{ bos_token }}Today: {{ strftime_now('%d %b %Y') }}\n" + template)
    profile = derive_profile(copy_header(smollm2, tmp_path / "picky.gguf", {"tokenizer.chat_template": picky}))
    assert profile.preamble.startswith("<|im_start|>Today: 01 Jan 2026\n")
    assert f"<|im_start|>user\n{SYSTEM}\n\nText: The parcel" in profile.preamble


@pytest.mark.model
def test_a_cut_inside_a_word_is_not_a_token_boundary(smollm2):
    """The check that picks the cut can fail: "Question" cut into "Ques" + "tion"."""
    derived = derive_profile(smollm2)
    assert boundary_holds(read_gguf(smollm2).tokenize, derived)
    torn = dataclasses.replace(derived, prefix=derived.prefix + "Ques", suffix=derived.suffix.removeprefix("Ques"))
    assert torn.prefix + torn.suffix == derived.prefix + derived.suffix
    assert not boundary_holds(read_gguf(smollm2).tokenize, torn)


@pytest.mark.model
def test_an_architecture_llama_cpp_cannot_load_is_refused(smollm2, tmp_path, capsys):
    path = copy_header(smollm2, tmp_path / "alien.gguf", {}, arch="nosucharch")
    err = one_line_refusal(capsys, ["profile", str(path)])
    assert "cannot load it" in err and "'nosucharch'" in err
    assert "cannot load it" in one_line_refusal(capsys, ["serve", "--model", str(path)])


@pytest.mark.model
def test_a_chat_template_that_does_not_render_is_refused(smollm2, tmp_path, capsys):
    path = copy_header(smollm2, tmp_path / "raises.gguf",
                       {"tokenizer.chat_template": "{{ raise_exception('only tool calls here') }}"})
    err = one_line_refusal(capsys, ["profile", str(path)])
    assert "chat template does not render" in err and "only tool calls here" in err
    dropped = copy_header(smollm2, tmp_path / "drops.gguf", {"tokenizer.chat_template": "{{ bos_token }}hello"})
    assert "does not keep the user's text" in one_line_refusal(capsys, ["profile", str(dropped)])


@pytest.mark.model
def test_a_vocabulary_without_a_yes_token_is_refused(smollm2, tmp_path, capsys):
    """Every token spelling "yes" renamed: "Yes" is then read as three byte tokens."""
    tokens = header(smollm2).fields["tokenizer.ggml.tokens"].contents()
    renamed = [f"<gone-{i}>" if t.replace("\u0120", " ").strip().lower() == "yes" else t
               for i, t in enumerate(tokens)]
    assert len(renamed) == len(tokens) and renamed != tokens
    path = copy_header(smollm2, tmp_path / "no-yes.gguf", {"tokenizer.ggml.tokens": renamed})
    err = one_line_refusal(capsys, ["profile", str(path)])
    assert "no usable yes token" in err


@pytest.mark.model
def test_a_worker_runs_the_sanity_check_only_on_a_derived_profile_served_uncalibrated(smollm2, tmp_path,
                                                                                     monkeypatch):
    """A calibrated one's fit asked hundreds of items (and the fit itself passes sanity=False)."""
    import worker.process
    from worker.process import build_engine

    checked = []
    monkeypatch.setattr(worker.process, "check_sanity", lambda engine, profile: checked.append(profile) or 1.0)
    settings = default_settings(model=str(smollm2), ctx=1024, state_cache=0)
    uncalibrated = dataclasses.replace(model_of(settings)[0], calibration_record="")
    calibrated = dataclasses.replace(uncalibrated, calibration_record=str(tmp_path / "fit.json"))
    for profile, sanity in ((calibrated, True), (uncalibrated, False), (uncalibrated, True)):
        build_engine(settings, profile, smollm2, 2, sanity=sanity).close()
    assert checked == [uncalibrated]


@pytest.mark.model
def test_the_sanity_check_warns_with_its_figure_when_answers_rank_at_chance(smollm2, caplog):
    """The same profile with yes and no swapped orders every pair the other way round, so one of
    the two is at or below chance and gets the warning, with its figure in it."""
    from jevfleet.harness.engine import new_engine

    settings = default_settings(model=str(smollm2))
    engine = new_engine(settings, ctx=2048, state_cache=0)
    try:
        profile = model_of(settings)[0]
        swapped = dataclasses.replace(profile, yes=profile.no, no=profile.yes)
        caplog.clear()  # building the engine checks an uncalibrated profile too (a fresh cache dir has no fit)
        with caplog.at_level(logging.WARNING, logger="jevfleet.worker"):
            shares = [check_sanity(engine, p) for p in (profile, swapped)]
    finally:
        engine.close()
    assert shares[0] + shares[1] == pytest.approx(1.0)  # the margins turned round, ties aside (none here)
    warned = [r.getMessage() for r in caplog.records if "sanity check" in r.getMessage()]
    low = min(shares)
    assert len(warned) == (1 if max(shares) > 0.5 else 2)
    assert f"({low:.2f})" in warned[0] and f"of {len(PAIRS)} built-in" in warned[0]
