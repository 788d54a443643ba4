"""Platt scaling of the yes−no logit margin, and writing the result into a model profile.

P(yes) = sigmoid(scale · margin + bias) (gateway/answers.py). scale and bias are the logistic
regression of the right answers on the raw margins, fitted by Newton's method: two parameters,
a convex loss, converged in a handful of steps, so a library would add nothing. As in Platt
(1999) the targets are (N₊+1)/(N₊+2) and 1/(N₋+2) rather than 1 and 0, which keeps the fit
finite and modest when a small set happens to be perfectly separated.
"""
from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import numpy as np

from gateway.answers import p_yes
from quality.metrics import Outcome
from shared.profiles import Profile


def fit_platt(margins: np.ndarray, labels: np.ndarray, *, steps: int = 100) -> tuple[float, float]:
    """(scale, bias) minimising the log loss of sigmoid(scale·m + bias) against labels (0/1),
    with scale >= 0: a calibration may shrink what the model says, never turn it around. When
    the unconstrained optimum has scale < 0 (the margins rank the fit half the wrong way), the
    constrained one is scale = 0 and the bias alone: every answer the base rate."""
    m = np.asarray(margins, dtype=float)
    labels = np.asarray(labels, dtype=bool)
    if m.size < 2 or labels.all() or not labels.any():
        raise ValueError("calibration needs yes/no items with both answers")
    n_yes, n_no = labels.sum(), (~labels).sum()
    y = np.where(labels, (n_yes + 1) / (n_yes + 2), 1 / (n_no + 2))
    x = np.column_stack([m, np.ones_like(m)])

    def loss(w: np.ndarray) -> float:
        z = x @ w
        return float(np.sum(np.logaddexp(0.0, z) - y * z))

    w = np.zeros(2)
    for _ in range(steps):
        p = 1.0 / (1.0 + np.exp(-(x @ w)))
        grad = x.T @ (p - y)
        hess = (x.T * (p * (1 - p))) @ x + 1e-9 * np.eye(2)
        step = np.linalg.solve(hess, grad)
        t, current = 1.0, loss(w)
        while loss(w - t * step) > current and t > 1e-6:  # backtrack: Newton may overshoot
            t /= 2
        w = w - t * step
        if np.max(np.abs(t * step)) < 1e-10:
            break
    if w[0] < 0:  # the loss is convex, so the constrained optimum lies on scale = 0
        return 0.0, flat_bias(labels)
    return float(w[0]), float(w[1])


def flat_bias(labels: np.ndarray) -> float:
    """The bias of the flat calibration (scale 0): the log-odds of the base rate of Platt's targets,
    so that every answer is the share of yes in the fit."""
    labels = np.asarray(labels, dtype=bool)
    n_yes, n_no = labels.sum(), (~labels).sum()
    base = float(np.mean(np.where(labels, (n_yes + 1) / (n_yes + 2), 1 / (n_no + 2))))
    return float(np.log(base / (1 - base)))


def recalibrated(profile: Profile, outcomes: list[Outcome], scale: float, bias: float) -> list[Outcome]:
    """The yes/no outcomes as they would be answered with another scale and bias."""
    cal = dataclasses.replace(profile, scale=scale, bias=bias)
    out = []
    for o in outcomes:
        if o.margin is None:
            raise ValueError(f"{o.id}: no raw margin (only in-process yes/no answers have one)")
        p = p_yes(cal, o.margin)
        out.append(dataclasses.replace(o, probs=(p, 1.0 - p)))
    return out


def _toml_value(value: float | bool | str) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value)  # a TOML basic string for the file names written here
    if not np.isfinite(value):
        raise ValueError(f"refusing to write a non-finite calibration value {value!r}")
    return repr(round(float(value), 4))


_SECTION = re.compile(r"^\s*\[(?P<name>[^\]]+)\]\s*(#.*)?$")
_KEY = re.compile(r"^(?P<head>\s*(?P<key>[A-Za-z_]+)\s*=\s*)(?P<value>\"[^\"]*\"|[^#\s]+)(?P<tail>.*)$")


def write_section(path: Path, section_name: str, values: dict[str, float | bool | str]) -> None:
    """Set keys of one [section] of a profile TOML, changing only those values (comments,
    layout and every other line stay byte for byte). A missing key or section is appended."""
    text = path.read_text(encoding="utf-8")
    lines = text.splitlines(keepends=True)
    section = ""
    seen: set[str] = set()
    end_of_section = None
    for i, line in enumerate(lines):
        head = _SECTION.match(line)
        if head:
            section = head["name"].strip()
            continue
        key = _KEY.match(line.rstrip("\r\n"))
        if section == section_name:
            end_of_section = i + 1
            if key and key["key"] in values and key["key"] not in seen:
                seen.add(key["key"])
                newline = line[len(line.rstrip("\r\n")):]
                lines[i] = f"{key['head']}{_toml_value(values[key['key']])}{key['tail']}{newline}"
    missing = [f"{k} = {_toml_value(v)}\n" for k, v in values.items() if k not in seen]
    if missing:
        if end_of_section is None:
            if lines and not lines[-1].endswith("\n"):
                lines[-1] += "\n"
            lines += [f"\n[{section_name}]\n"]
            end_of_section = len(lines)
        lines[end_of_section:end_of_section] = missing
    path.write_text("".join(lines), encoding="utf-8")


def write_calibration(path: Path, scale: float, bias: float) -> None:
    """Set [calibration] scale and bias (the plain margin's) in a profile TOML."""
    write_section(path, "calibration", {"scale": scale, "bias": bias})
