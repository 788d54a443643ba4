"""`jevfleet eval` and `jevfleet calibrate`: the command-line side of this package."""
from __future__ import annotations

import sys
import urllib.error
from pathlib import Path

import numpy as np

from quality.calibration import fit_platt, recalibrated, write_calibration
from quality.evaluate import Report, ask_all, describe, make_report, write_report
from quality.items import load_set
from quality.local import LocalRunner
from quality.remote import RemoteRunner
from shared.config import Settings


def _finish(report: Report, out: str) -> None:
    print(describe(report))
    if out:
        for path in write_report(report, Path(out)):
            print(f"wrote {path}")


def run_eval(settings: Settings, *, set_path: str, url: str, split: str, out: str) -> int:
    items = load_set(set_path, split)
    runner = RemoteRunner(url) if url else LocalRunner(settings)
    where = url or f"profile {settings.profile}, in-process"
    try:
        outcomes, skipped = ask_all(runner, items, desc=Path(set_path).name)
    except urllib.error.URLError as exc:
        print(f"jevfleet eval: cannot reach {url}: {exc.reason}", file=sys.stderr)
        return 2
    finally:
        runner.close()
    title = f"{Path(set_path).name}{' (' + split + ' half)' if split else ''}, {where}"
    _finish(make_report(title, outcomes, skipped), out)
    return 0 if outcomes else 1


def run_calibrate(settings: Settings, *, set_path: str, out: str, dry_run: bool) -> int:
    items = [i for i in load_set(set_path) if i.type == "noul"]
    fit_ids = {i.id for i in items if i.split == "fit"}
    test_ids = {i.id for i in items if i.split == "test"}
    if not fit_ids or not test_ids:
        print("jevfleet calibrate: the set needs yes/no items in both a fit and a test split", file=sys.stderr)
        return 2
    runner = LocalRunner(settings)
    profile = runner.profile
    try:
        outcomes, skipped = ask_all(runner, [i for i in items if i.id in fit_ids | test_ids], desc="margins")
    finally:
        runner.close()
    fit = [o for o in outcomes if o.id in fit_ids]
    test = [o for o in outcomes if o.id in test_ids]
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
