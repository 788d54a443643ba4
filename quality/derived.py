"""The calibration a profile derived from a GGUF file is served with, fitted where it is first
served and kept for the gateways to read.

A derived profile (shared/derive.py) has the prompt right but no calibration: its P(yes) would be
sigmoid(raw margin), which for SmolLM2 put every answer between 0.03 and 0.13. A hand-written
profile gets its scale and bias from `jevfleet calibrate`, fitted on the fit split's plainly worded
yes/no items; a derived one gets them the same way, without the user supplying labels: the same
items of the built-in set (shared/derive.CALIBRATION_SET) are asked in-process, through the
gateway's and a worker's code (quality/local.py), and Platt scaling is fitted on their margins.

Only the gateway applies a calibration, and it has no model to fit one with. So `jevfleet serve`
(and eval and decide, which answer in-process) fit it before anything is served and write it to
cache_dir/calibration/, named by the model file, the prompt, the set and llama.cpp's version;
every gateway started from the same cache then reads the same two numbers. It is fitted once per
model file: 832 items, 44 s (Gemma) to 106 s (SmolLM2) on two cores, with a progress bar; a file
whose forward passes cost more is fitted on fewer (shared/derive.calibration_size: its layer bytes
times the tokens an item adds; ~140 items for Gemma 3 1B, at least 128), so the fit takes about
as long whatever the file. The sanity check a worker runs on a derived profile is skipped here:
the fit asks hundreds of such items, and the workers started after it check again.

Where the margins rank the items no better than chance, the fit is flat: a two-fold check on the
fit split itself (by question, so a scenario's two texts stay together) must show Brier skill, else
every answer is the base rate, as a hand-written profile would get from calibrate's refusal. The
test split is never read here: it stays held back for `jevfleet eval`.

A model the worker's start-up checks refuse is refused here first, in one line (CalibrationError,
a ProfileError: the CLI prints it and exits 2), since calibrating loads it as a worker does.
"""
from __future__ import annotations

import fcntl
import json
import math
import os
import sys
import time
from pathlib import Path

import numpy as np
from tqdm import tqdm

from quality.calibration import fit_platt, flat_bias
from quality.items import Item, load_set
from quality.local import LocalRunner
from shared.config import Settings
from shared.derive import (CALIBRATION_SET, calibration_record, calibration_size, serving_profile,
                           with_recorded_calibration)
from shared.gguf_file import layer_bytes
from shared.profiles import Profile, ProfileError
from shared.refusal import reason


class CalibrationError(ProfileError):
    """A derived profile that cannot be calibrated here, in one line (the CLI: exit 2, no traceback)."""


TAG = "straightforward"  # the items calibrate fits a hand-written profile on by default (eval/README.md)


def calibrated_serving_profile(settings: Settings, *, head: bool | None = None) -> Profile:
    """serving_profile for these settings, as served: a derived one calibrated (calibrated)."""
    return calibrated(settings, serving_profile(settings, head=head))


def calibrated(settings: Settings, profile: Profile) -> Profile:
    """`profile` as served: a derived one with the calibration recorded for it, fitted here first
    if none is recorded yet (unless derived_calibration is 0, or the set is not installed: then
    it is served uncalibrated and this says so on stderr). A hand-written one as it is."""
    if not profile.derived:
        return profile
    record = calibration_record(settings.cache_path, profile)
    if record is None or not record.is_file():
        if record is None or not settings.derived_calibration:
            why = "derived_calibration is 0" if record else f"the built-in set {CALIBRATION_SET} is not here"
            print(f"jevfleet: warning: the profile derived from {profile.source.name} is served uncalibrated "
                  f"({why}); P(yes) is sigmoid(raw margin)", file=sys.stderr)
            return profile
        record.parent.mkdir(parents=True, exist_ok=True)
        with open(record.with_suffix(".lock"), "w") as lock:  # two serves at once: one fits, the other reads it
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not record.is_file():
                _fit_and_record(settings, profile, record)
    return with_recorded_calibration(profile, settings.cache_path)


def _fit_and_record(settings: Settings, profile: Profile, record: Path) -> None:
    print(f"jevfleet: calibrating the profile derived from {profile.source.name} (once per model file, kept in "
          f"{record.parent}): loading it as a worker does", file=sys.stderr, flush=True)
    start = time.monotonic()
    try:
        runner = LocalRunner(settings, profile, sanity=False)  # the fit is the larger check
    except RuntimeError as exc:  # the model thread's load failed: the canary refused it, or llama.cpp did
        raise CalibrationError(f"the profile derived from {profile.source.name} cannot be calibrated: "
                               f"{reason(exc.__cause__ or exc)}") from None  # the load's own, not the thread's wrapper
    pool = [i for i in load_set(CALIBRATION_SET, "fit") if i.type == "noul" and i.tag == TAG]
    tokens, layers = item_tokens(runner, pool), layer_bytes(profile.source)
    items = spread(pool, calibration_size(layers, tokens))
    print(f"jevfleet: calibrating on {len(items)} yes/no items of {CALIBRATION_SET.name} ({layers / 2**20:.0f} MiB "
          f"of layers, {tokens:.1f} tokens an item)", file=sys.stderr, flush=True)
    try:
        with tqdm(total=len(items), desc="calibrating", unit="q", file=sys.stderr) as bar:
            outcomes = runner.ask(items, bar.update)
    finally:
        runner.close()
    answered = [o for o in outcomes if getattr(o, "margin", None) is not None]
    if len(answered) != len(items):
        raise CalibrationError(f"calibrating the profile derived from {profile.source.name}: "
                               f"{len(items) - len(answered)} of {len(items)} items got no margin")
    margins = np.array([o.margin for o in answered])
    labels = np.array([o.answer == 0 for o in answered])
    groups = [repr((i.kind, i.question)) for i in items]  # a scenario: one question, two texts
    scale, bias = fit_platt(margins, labels)
    skill = cross_validated_skill(margins, labels, groups)
    if not skill > 0:  # no better than the base rate on held-out folds: flat, as calibrate would refuse
        scale, bias = 0.0, flat_bias(labels)
    tmp = record.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(json.dumps({
        "scale": scale, "bias": bias, "items": len(items), "item_tokens": round(tokens, 2),
        "layer_mib": round(layers / 2**20), "set": CALIBRATION_SET.name, "split": "fit", "tag": TAG,
        "two_fold_brier_skill": skill if math.isfinite(skill) else None,
        "model": str(profile.source.resolve()), "profile": profile.name,
        "seconds": round(time.monotonic() - start, 1),
        "fitted": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}, indent=1) + "\n")
    os.replace(tmp, record)
    print(f"jevfleet: calibration scale = {scale:.4f}, bias = {bias:.4f} (two-fold Brier skill {skill:.3f}) "
          f"in {record}", file=sys.stderr, flush=True)


def item_tokens(runner: LocalRunner, items: list[Item]) -> float:
    """The tokens an item adds to the kept preamble (its state and its question), on average, as
    the gateway renders and tokenizes it (the runner's request path): what its forward pass reads."""
    counts = [runner.decider.prepare(item.request(runner.profile.name))[1].count - runner.tokenizer.preamble_tokens
              for item in items]
    return sum(counts) / max(len(counts), 1)


def spread(items: list[Item], most: int) -> list[Item]:
    """At most `most` items, in the set's order, whole scenarios (a question's texts stay together),
    every kind of question keeping its share: the kind with the fewest items picked so far takes its
    next scenario while that fits, each kind's scenarios taken spread over its own (_spread_order).
    All when they fit. (A stride through the whole set skipped a kind at 128 items.)"""
    if len(items) <= most:
        return items
    kinds: dict[str, dict[str, list[Item]]] = {}
    for item in items:
        kinds.setdefault(item.kind, {}).setdefault(item.question, []).append(item)
    queues = [[groups[i] for i in _spread_order(len(groups))]
              for groups in (list(scenarios.values()) for scenarios in kinds.values())]
    counts, total, chosen = [0] * len(queues), 0, set()
    while True:
        fitting = [k for k, queue in enumerate(queues) if queue and total + len(queue[0]) <= most]
        if not fitting:
            break
        k = min(fitting, key=lambda k: counts[k])
        scenario = queues[k].pop(0)
        chosen.update(map(id, scenario))
        counts[k] += len(scenario)
        total += len(scenario)
    return [item for item in items if id(item) in chosen]


def _spread_order(n: int) -> list[int]:
    """0 .. n-1 in an order whose every beginning is spread over the range: the bins of the van der
    Corput points 0, 1/2, 1/4, 3/4, 1/8 ... (a bin already taken is passed over)."""
    order: list[int] = []
    j = 0
    while len(order) < n:
        point, weight, bits = 0.0, 0.5, j
        while bits:
            point += weight * (bits & 1)
            bits, weight = bits >> 1, weight / 2
        if int(point * n) not in order:
            order.append(int(point * n))
        j += 1
    return order


def cross_validated_skill(margins: np.ndarray, labels: np.ndarray, groups: list[str]) -> float:
    """Brier skill of Platt scaling on held-out data: the groups (e.g. questions) alternate between
    two folds, each fold is predicted by the fit on the other, and the Brier score is compared
    with predicting each fold's base rate from the other fold (-inf when a fold has one answer)."""
    order = {g: k for k, g in enumerate(dict.fromkeys(groups))}
    fold = np.array([order[g] % 2 for g in groups])
    p = np.empty(len(labels))
    base = np.empty(len(labels))
    for k in (0, 1):
        train, held = fold != k, fold == k
        try:
            scale, bias = fit_platt(margins[train], labels[train])
        except ValueError:  # a fold with one answer only: nothing to say
            return -math.inf
        p[held] = 1 / (1 + np.exp(-(scale * margins[held] + bias)))
        base[held] = labels[train].mean()
    brier, reference = np.mean((p - labels) ** 2), np.mean((base - labels) ** 2)
    return float(1 - brier / reference) if reference > 0 else -math.inf
