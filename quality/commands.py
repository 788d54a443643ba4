"""`jevfleet eval` and `jevfleet calibrate`: the command-line side of this package."""
from __future__ import annotations

import dataclasses
import sys
import urllib.error
from pathlib import Path

import numpy as np

from quality.calibration import fit_platt, recalibrated, write_calibration, write_section
from quality.derived import calibrated_serving_profile
from quality.evaluate import Report, ask_all, describe, make_report, write_report
from quality.head import feature_ids, fit_head
from quality.items import Item, load_set
from quality.local import LocalRunner
from quality.metrics import Outcome, brier_skill
from quality.plain import PlainRunner
from quality.remote import RemoteRunner
from shared.config import Settings
from shared.derive import serving_profile
from shared.model_files import resolve_model
from shared.profiles import HEAD_CHOICES, Profile
from worker.head import Head


def _finish(report: Report, out: str) -> None:
    print(describe(report))
    if out:
        for path in write_report(report, Path(out)):
            print(f"wrote {path}")


def _set_name(set_path: list[str]) -> str:
    return " + ".join(Path(p).name for p in set_path)


def run_eval(settings: Settings, *, set_path: list[str], url: str, split: str, out: str, head: str = "profile",
             reading: str = "served") -> int:
    """head: "profile" (as the profile says), "on" or "off" (in-process only); reading: "plain" asks
    the profile's GGUF as a llama-server user would instead (quality/plain.py)."""
    items = load_set(set_path, split)
    profile = (serving_profile(settings, head=HEAD_CHOICES[head]) if url or reading == "plain"
               else calibrated_serving_profile(settings, head=HEAD_CHOICES[head]))  # in-process: as served
    if reading == "plain":
        runner = PlainRunner(resolve_model(profile, settings.cache_path, settings.model), profile,
                             threads=settings.threads or settings.cores_per_worker)
        where = f"the plain reading of {profile.name}'s GGUF (one chat turn, first token), in-process"
    else:
        runner = RemoteRunner(url) if url else LocalRunner(settings, profile)
        where = url or (f"profile {profile.name}{' (derived from the file)' if profile.derived else ''}"
                        f"{' with its head' if profile.head else ''}, in-process")
    try:
        outcomes, skipped = ask_all(runner, items, desc=_set_name(set_path))
    except urllib.error.URLError as exc:
        print(f"jevfleet eval: cannot reach {url}: {exc.reason}", file=sys.stderr)
        return 2
    finally:
        runner.close()
    title = f"{_set_name(set_path)}{' (' + split + ' half)' if split else ''}, {where}"
    _finish(make_report(title, outcomes, skipped), out)
    return 0 if outcomes else 1


def fit_tag(items: list[Item], tag: str) -> str:
    """The tag calibration fits on: as asked, or by default the plainly worded items where the set
    has them (what most traffic looks like), else every item ("all")."""
    if tag:
        return tag
    return "straightforward" if any(i.tag == "straightforward" for i in items) else "all"


def run_calibrate(settings: Settings, *, set_path: list[str], out: str, dry_run: bool, head: bool = False,
                  tag: str = "") -> int:
    """Fit scale and bias on the fit split's yes/no items of one tag, report the test split per
    kind and tag, and write them into the profile unless the fit has no Brier skill on the test
    split's items of that tag (then exit 2: a flat line would be shipped)."""
    items = [i for i in load_set(set_path) if i.type == "noul"]
    tag = fit_tag(items, tag)
    chosen = [i for i in items if tag == "all" or i.tag == tag]
    fit_ids = {i.id for i in chosen if i.split == "fit"}
    test_ids = {i.id for i in items if i.split == "test"}
    if not fit_ids or not {i.id for i in chosen if i.split == "test"}:
        print(f"jevfleet calibrate: the set needs yes/no items tagged {tag!r} in both a fit and a test split",
              file=sys.stderr)
        return 2
    runner = LocalRunner(settings, serving_profile(settings, head=False))
    profile = runner.profile
    if head:
        answer_ids = runner.tokenizer.yes_ids + runner.tokenizer.no_ids
        runner.engine.readout.capture = feature_ids(runner.engine.n_vocab, answer_ids)
    try:
        outcomes, skipped = ask_all(runner, [i for i in items if i.id in fit_ids | test_ids], desc="margins")
    finally:
        runner.close()
    fit = [o for o in outcomes if o.id in fit_ids]
    test = [o for o in outcomes if o.id in test_ids]
    scale, bias = fit_platt(np.array([o.margin for o in fit]), np.array([o.answer == 0 for o in fit]))
    _warn_if_flat("margin", scale)
    before = make_report(f"test split, before: scale={profile.scale:g} bias={profile.bias:g}", test, skipped)
    after = make_report(f"test split, after: scale={scale:.4f} bias={bias:.4f} (fitted on {len(fit)} fit items, "
                        f"tag {tag})", recalibrated(profile, test, scale, bias))
    _finish(before, str(Path(out) / "before") if out else "")
    print()
    _finish(after, str(Path(out) / "after") if out else "")
    learned = _fit_head(profile, runner, fit, test, out) if head else None
    skill = brier_skill([o for o in recalibrated(profile, test, scale, bias) if tag == "all" or o.tag == tag])
    if not skill > 0:
        print(f"jevfleet calibrate: refused: the fit has Brier skill {skill:.3f} on the test split's {tag} items "
              "(no better than always answering their base rate), so every answer would be a flat line; "
              f"{profile.source} left unchanged", file=sys.stderr)
        return 2
    if dry_run:
        print(f"\n--dry-run: {profile.source} left unchanged")
        return 0
    if profile.derived:  # its source is the GGUF: the figures need a profile file to go into
        print(f"jevfleet calibrate: the profile is derived from {profile.source}; write it out with `jevfleet "
              "profile`, then calibrate that file with --profile FILE.toml", file=sys.stderr)
        return 2
    write_calibration(profile.source, scale, bias)
    print(f"\nwrote [calibration] scale = {scale:.4f}, bias = {bias:.4f} into {profile.source}")
    if learned:
        head_obj, head_scale, head_bias = learned
        path = profile.source.with_name(f"{profile.source.stem}.head.npz")  # next to the profile file
        head_obj.save(path)
        write_section(profile.source, "head", {"file": path.name, "scale": head_scale, "bias": head_bias})
        print(f"wrote {path} and [head] file, scale = {head_scale:.4f}, bias = {head_bias:.4f} into {profile.source}"
              " (`enabled` unchanged: turn the head on only where it beats the margin on the test half)")
    return 0


def _warn_if_flat(what: str, scale: float) -> None:
    if scale == 0.0:
        print(f"note: the {what} ranks the fit half no better than chance (or the wrong way round); "
              "scale held at 0, so every answer is the base rate (quality/calibration.fit_platt)")


def _fit_head(profile: Profile, runner: LocalRunner, fit: list[Outcome], test: list[Outcome],
              out: str) -> tuple[Head, float, float]:
    """Fit the learned head and its calibration on the fit half and report it on the test half."""
    y_fit = np.array([o.answer == 0 for o in fit])
    learned, penalty, oof = fit_head(np.array([runner.features[o.id] for o in fit]), y_fit,
                                     runner.engine.readout.capture)
    scale, bias = fit_platt(oof, y_fit)
    _warn_if_flat("head", scale)
    test_logits = [learned.logit_of(runner.features[o.id]) for o in test]
    report = make_report(f"test half, learned head ({len(learned.ids)} logit columns, penalty {penalty:g}; "
                         f"scale={scale:.4f} bias={bias:.4f} on out-of-fold logits of {len(fit)} fit items)",
                         recalibrated(profile, [dataclasses.replace(o, margin=z) for o, z in zip(test, test_logits)],
                                      scale, bias))
    print()
    _finish(report, str(Path(out) / "head") if out else "")
    return learned, scale, bias
