"""Model profiles (conf/models/*.toml): the GGUF, the prompt shape, the answer tokens, calibration.

Gateway and worker load the same profile; the gateway renders and tokenizes prompts from it,
the worker only needs the GGUF. Keeping prompt knowledge in one file is what lets a user point
the fleet at another GGUF without touching code.
"""
from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from shared.config import CONF_DIR


@dataclass(frozen=True, kw_only=True)
class Profile:
    name: str
    description: str
    release_date: str
    licence: str
    package: str
    path: str
    add_bos: bool
    preamble: str
    prefix: str
    suffix: str
    default_question: str
    true_means: str
    false_means: str
    choice_question: str
    score_question: str
    choice_default: str
    score_default: str
    option_described: str
    yes: tuple[str, ...]
    no: tuple[str, ...]
    scale: float
    bias: float
    source: Path


def profile_path(name_or_path: str) -> Path:
    candidate = Path(name_or_path)
    if candidate.suffix == ".toml":
        return candidate
    return CONF_DIR / "models" / f"{name_or_path}.toml"


def load_profile(name_or_path: str) -> Profile:
    path = profile_path(name_or_path)
    if not path.is_file():
        raise FileNotFoundError(f"no model profile {name_or_path!r} (looked for {path})")
    with path.open("rb") as fh:
        raw = tomllib.load(fh)
    model, prompt, cal = raw.get("model", {}), raw["prompt"], raw.get("calibration", {})
    return Profile(
        name=raw["name"],
        description=raw.get("description", ""),
        release_date=raw.get("release_date", "1970-01-01"),
        licence=raw.get("licence", ""),
        package=model.get("package", ""),
        path=model.get("path", ""),
        add_bos=bool(model.get("add_bos", True)),
        preamble=prompt.get("preamble", ""),
        prefix=prompt["prefix"],
        suffix=prompt["suffix"],
        default_question=prompt["default_question"],
        true_means=prompt.get("true_means", " (Yes means: {text})"),
        false_means=prompt.get("false_means", " (No means: {text})"),
        choice_question=prompt["choice_question"],
        score_question=prompt["score_question"],
        choice_default=prompt["choice_default"],
        score_default=prompt["score_default"],
        option_described=prompt["option_described"],
        yes=tuple(prompt["yes"]),
        no=tuple(prompt["no"]),
        scale=float(cal.get("scale", 1.0)),
        bias=float(cal.get("bias", 0.0)),
        source=path,
    )


def preamble_tokens(tokenize: Callable[..., list[int]], profile: Profile) -> list[int]:
    """The tokens every prompt of `profile` starts with: the preamble as it tokenizes in front
    of a state (the boundary token may merge), found as the common prefix of two prompts.
    Workers keep them read; the gateway does not count them as queued work."""
    a = tokenize(profile.preamble + profile.prefix.format(state="alpha"), add_bos=profile.add_bos)
    b = tokenize(profile.preamble + profile.prefix.format(state="Zulu 9"), add_bos=profile.add_bos)
    same = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    return a[:same]
