"""`make test`: the suite in three tiers, cheapest first, each in its own pytest process.

    fast   no model: unit tests, and the HTTP contract on an in-process gateway (tests/inprocess.py)
    model  the GGUF loaded in the test process (engine, snapshots, warmup, tokenizer, decide, eval)
    fleet  real fleets under supervisord (marker `fleet`, or any test using the `fleet` fixture)

Every tier runs, and each tier's wall time is printed, with what it spent on one-off work kept in
the cache dir (derived profiles' calibrations, measured batch shapes, exact-reading figures: seconds on a cold cache,
nothing once they are kept); make test fails if any tier fails or
collects nothing (pytest exit 5), so a wrong marker expression cannot pass silently.

The guard keeps the tiers honest: a test not marked `model` or `fleet` that loads the model in
this process, starts `jevfleet` in a subprocess that would load it, or starts a fleet fails at
once with the marker it needs (installed per test by tests/conftest.py).

    .venv/bin/python -m tests.tiers [pytest args for every tier]
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ElementTree
from pathlib import Path

import jevfleet.harness.fleet
import shared.llama
from shared.config import env_var, load_settings

TIERS = (("fast", "not model and not fleet"), ("model", "model and not fleet"), ("fleet", "fleet"))
NOTHING_COLLECTED = 5  # pytest's exit status when no test was selected
# Where a subprocess of an unmarked test finds the model: nowhere. `jevfleet decide` and workers then
# stop with "model file ... does not exist", the file name saying why.
NO_MODEL = "/nonexistent/an-unmarked-test-loads-the-model--mark-it-model.gguf"
# The model every test runs that names none, here and in every process the tests start (fleets,
# `jevfleet` commands) and in default_settings(): the small one. The served default (1.5B) is
# started by the tests that are about it.
SMALL_PROFILE = "gemma-3-270m"
os.environ[env_var("default_profile")] = SMALL_PROFILE


class TierError(Exception):
    """A test does something its tier must not: its marker is missing."""


_real_llama = shared.llama.llama
_forbidden: dict[str, str] = {}  # what the running test may not do -> why
_model_env = os.environ.get("JEV_MODEL")  # as the run was started, for the tests that may load it


def _guarded_llama(*args, **kwargs):
    if "model" in _forbidden:
        raise TierError(_forbidden["model"])
    return _real_llama(*args, **kwargs)


def install_guard() -> None:
    """Route every in-process model load (shared.llama.load_model calls llama()) through the guard."""
    shared.llama.llama = _guarded_llama


def guard(test: str, markers: set[str]) -> None:
    """Set what `test`, carrying `markers`, may do; called before its fixtures are set up."""
    _forbidden.clear()
    jevfleet.harness.fleet.refusal = "" if "fleet" in markers else f"{test} starts a fleet: mark it @pytest.mark.fleet"
    if markers & {"model", "fleet"}:
        _set_env("JEV_MODEL", _model_env)
    else:
        _forbidden["model"] = f"{test} loads the model: mark it @pytest.mark.model"
        _set_env("JEV_MODEL", NO_MODEL)


def _set_env(name: str, value: str | None) -> None:
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value


def outcome(code: int) -> str:
    if code == 0:
        return "passed"
    return "NOTHING COLLECTED" if code == NOTHING_COLLECTED else f"FAILED (pytest exit {code})"


def counts(junit: Path) -> tuple[int, int, int]:
    """(passed, failed, skipped) of one tier from pytest's JUnit XML; errors count as failed."""
    if not junit.exists():
        return 0, 0, 0
    total = failed = skipped = 0
    for suite in ElementTree.parse(junit).getroot().iter("testsuite"):
        total += int(suite.get("tests", 0))
        failed += int(suite.get("failures", 0)) + int(suite.get("errors", 0))
        skipped += int(suite.get("skipped", 0))
    return total - failed - skipped, failed, skipped

ONE_OFF_KINDS = ("calibration", "shapes", "exact")  # cache_dir's folders of one-off work


def one_off_records(cache_dir: Path) -> dict[Path, float]:
    """The records of one-off work kept in the cache dir, each with the seconds it took to make:
    derived profiles' calibrations (quality/derived.py), measured batch shapes and exact-reading
    figures (worker/canary.py).
    A run that finds one reads it in milliseconds; one that does not pays the seconds."""
    found = {}
    for record in sorted(path for kind in ONE_OFF_KINDS for path in cache_dir.glob(f"{kind}/*.json")):
        try:
            found[record] = float(json.loads(record.read_text()).get("seconds", 0.0))
        except (OSError, ValueError):
            continue
    return found


def one_off_line(before: dict[Path, float], after: dict[Path, float]) -> str:
    """What a tier paid for one-off work (records it made: cold) and what it found made (warm)."""
    made = {path: s for path, s in after.items() if path not in before}
    kinds = ", ".join(f"{sum(1 for p in made if p.parent.name == kind)} {kind}" for kind in ONE_OFF_KINDS)
    return (f"one-off work: {len(made)} records made now ({kinds}; {sum(made.values()):.1f} s cold), "
            f"{len(before)} found cached (warm; they cost {sum(before.values()):.1f} s when made)")


def main(args: list[str]) -> int:
    results = []
    cache_dir = load_settings().cache_path
    with tempfile.TemporaryDirectory() as tmp:
        for name, expression in TIERS:
            print(f"\n=== tier {name}: pytest -m '{expression}'", flush=True)
            junit = Path(tmp) / f"{name}.xml"
            before = one_off_records(cache_dir)
            start = time.monotonic()
            code = subprocess.run([sys.executable, "-m", "pytest", "-m", expression, f"--junitxml={junit}",
                                   *args]).returncode
            results.append((name, code, time.monotonic() - start, counts(junit),
                            one_off_line(before, one_off_records(cache_dir))))
    print(f"\n=== tiers (one-off work kept in {cache_dir})")
    for name, code, seconds, (passed, failed, skipped), one_off in results:
        print(f"{name:<6} {seconds:7.1f} s  {outcome(code)}  ({passed} passed, {failed} failed, {skipped} skipped)")
        print(f"{'':<6} {one_off}")
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"total  {sum(r[2] for r in results):7.1f} s  (load average {load})")
    # One closing line for the whole run, in the plain form CI reads.
    print(f"{sum(r[3][0] for r in results)} passed, {sum(r[3][1] for r in results)} failed, "
          f"{sum(r[3][2] for r in results)} skipped")
    return 0 if all(code == 0 for _, code, *_ in results) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
