"""`jevfleet eval` and `jevfleet calibrate`: the command-line side of this package."""
from __future__ import annotations

import dataclasses
import sys
import urllib.error
from pathlib import Path

import numpy as np

from quality.calibration import fit_platt, recalibrated, write_calibration, write_section
from quality.evaluate import Report, ask_all, describe, make_report, write_report
from quality.head import feature_ids, fit_head
from quality.items import Skipped, load_set
from quality.local import LocalRunner
from quality.metrics import Outcome
from quality.remote import RemoteRunner
from shared.config import Settings
from shared.profiles import Profile, load_profile


def _finish(report: Report, out: str) -> None:
    print(describe(report))
    if out:
        for path in write_report(report, Path(out)):
            print(f"wrote {path}")


def _set_name(set_path: list[str]) -> str:
    return " + ".join(Path(p).name for p in set_path)


def run_eval(settings: Settings, *, set_path: list[str], url: str, split: str, out: str, head: str = "profile") -> int:
    """head: "profile" (as the profile says), "on" or "off" (in-process only)."""
    items = load_set(set_path, split)
    profile = load_profile(settings.profile, head={"on": True, "off": False}.get(head))
    runner = RemoteRunner(url) if url else LocalRunner(settings, profile)
    where = url or f"profile {settings.profile}{' with its head' if profile.head else ''}, in-process"
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


def run_calibrate(settings: Settings, *, set_path: list[str], out: str, dry_run: bool, head: bool = False) -> int:
    items = [i for i in load_set(set_path) if i.type == "noul"]
    fit_ids = {i.id for i in items if i.split == "fit"}
    test_ids = {i.id for i in items if i.split == "test"}
    if not fit_ids or not test_ids:
        print("jevfleet calibrate: the set needs yes/no items in both a fit and a test split", file=sys.stderr)
        return 2
    runner = LocalRunner(settings, load_profile(settings.profile, head=False))
    profile = runner.profile
    if head:
        runner.engine.readout.capture = feature_ids(runner.engine.n_vocab, runner.tok.yes_ids + runner.tok.no_ids)
    try:
        outcomes, skipped = ask_all(runner, [i for i in items if i.id in fit_ids | test_ids], desc="margins")
    finally:
        runner.close()
    fit = [o for o in outcomes if o.id in fit_ids]
    test = [o for o in outcomes if o.id in test_ids]
    if head:
        return _calibrate_head(profile, runner, fit, test, skipped, out=out, dry_run=dry_run)
    scale, bias = fit_platt(np.array([o.margin for o in fit]), np.array([o.answer == 0 for o in fit]))
    before = make_report(f"test half, before: scale={profile.scale:g} bias={profile.bias:g}", test, skipped)
    after = make_report(f"test half, after: scale={scale:.4f} bias={bias:.4f} (fitted on {len(fit)} fit items)",
                        recalibrated(profile, test, scale, bias))
    _finish(before, str(Path(out) / "before") if out else "")
    print()
    _finish(after, str(Path(out) / "after") if out else "")
    if dry_run:
        print(f"\n--dry-run: {profile.source} left unchanged")
    else:
        write_calibration(profile.source, scale, bias)
        print(f"\nwrote [calibration] scale = {scale:.4f}, bias = {bias:.4f} into {profile.source}")
    return 0


def _calibrate_head(profile: Profile, runner: LocalRunner, fit: list[Outcome], test: list[Outcome],
                    skipped: list[Skipped], *, out: str, dry_run: bool) -> int:
    """Fit the learned head on the fit half; report the test half with the profile's margin
    calibration and with the head; write the head file and the [head] section."""
    x_fit = np.array([runner.features[o.id] for o in fit])
    y_fit = np.array([o.answer == 0 for o in fit])
    learned, penalty, oof = fit_head(x_fit, y_fit, runner.engine.readout.capture)
    scale, bias = fit_platt(oof, y_fit)
    test_logits = [learned.logit_of(runner.features[o.id]) for o in test]
    reports = [
        make_report(f"test half, logit margin: scale={profile.scale:g} bias={profile.bias:g}", test, skipped),
        make_report(f"test half, learned head ({len(learned.ids)} logit columns, penalty {penalty:g}, fitted on "
                    f"{len(fit)} fit items; scale={scale:.4f} bias={bias:.4f})",
                    recalibrated(profile, [dataclasses.replace(o, margin=z) for o, z in zip(test, test_logits)],
                                 scale, bias)),
    ]
    for report, name in zip(reports, ("margin", "head")):
        _finish(report, str(Path(out) / name) if out else "")
        print()
    if dry_run:
        print(f"--dry-run: {profile.source} left unchanged")
        return 0
    path = profile.source.with_name(f"{profile.name}.head.npz")
    learned.save(path)
    write_section(profile.source, "head", {"file": path.name, "scale": scale, "bias": bias})
    print(f"wrote {path} and [head] file/scale/bias into {profile.source} "
          "(its `enabled` is unchanged: turn the head on where it beats the margin on the test half)")
    return 0
