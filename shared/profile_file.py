"""The schema of a model profile file (conf/models/*.toml), as pydantic models: every key a
profile may have, its type, bounds and default, in one place. An unknown or misspelt key is
refused (extra="forbid") instead of silently falling back to a default, and the templates must
hold the placeholders the gateway fills in. shared/profiles.load_profile reads a file through
this and turns a refusal into ProfileError, one line that names the key.

What the file cannot say by itself, that each answer word is one token of the model's
vocabulary, is checked where a vocabulary is at hand: shared/profiles.answer_ids.
"""
from __future__ import annotations

import math
import re
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

Text = Annotated[str, Field(min_length=1)]


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ModelSection(Section):
    package: str = ""  # a Python package with assemble(), or one shipping `package_file` whole
    package_file: str = ""
    # Or chunks shipped in several packages, "package/path/in/it", joined in this order once into
    # the cache dir; `sha256` of the joined file is then required and checked.
    parts: tuple[Text, ...] = ()
    sha256: str = ""
    path: str = ""  # a GGUF file; overrides nothing but `package`
    add_bos: bool = True

    @model_validator(mode="after")
    def _parts_are_pinned(self) -> ModelSection:
        if self.parts and not re.fullmatch(r"[0-9a-f]{64}", self.sha256):
            raise ValueError("parts need sha256: the 64 hex digits of the joined file")
        if any("/" not in part for part in self.parts):
            raise ValueError("each part is package/path/inside/it")
        return self


def _holds(template: str, *names: str) -> str:
    missing = [n for n in names if "{" + n + "}" not in template]
    if missing:
        raise ValueError(f"must contain {', '.join('{' + n + '}' for n in missing)}")
    return template


# The placeholders the gateway fills in each template (gateway/prompts.py).
PLACEHOLDERS = {"prefix": ("state",), "suffix": ("question",), "true_means": ("text",), "false_means": ("text",),
                "choice_question": ("option",), "score_question": ("level",), "option_described": ("name",)}


class PromptSection(Section):
    control: tuple[Text, ...] = ()
    preamble: str = ""
    prefix: Text
    suffix: Text
    default_question: Text
    true_means: Text = " (Yes means: {text})"
    false_means: Text = " (No means: {text})"
    choice_question: Text
    score_question: Text
    choice_default: Text
    score_default: Text
    option_described: Text
    yes: tuple[Text, ...] = Field(min_length=1)
    no: tuple[Text, ...] = Field(min_length=1)

    @field_validator("prefix", "suffix", "true_means", "false_means", "choice_question", "score_question",
                     "option_described")
    @classmethod
    def _placeholder(cls, value: str, info) -> str:
        return _holds(value, *PLACEHOLDERS[info.field_name])

    @model_validator(mode="after")
    def _distinct_answers(self) -> PromptSection:
        both = set(self.yes) & set(self.no)
        if both:
            raise ValueError(f"yes and no share {sorted(both)}")
        return self


class CalibrationSection(Section):
    scale: float = Field(1.0, ge=0.0)  # never negative: a calibration may flatten, not turn around
    bias: float = 0.0

    @field_validator("scale", "bias")
    @classmethod
    def _finite(cls, value: float) -> float:
        if not math.isfinite(value):
            raise ValueError("must be a finite number")
        return value


class HeadSection(CalibrationSection):
    file: str = ""
    enabled: bool = False


class DerivedSection(Section):
    """A rendered derived profile's (shared/derive.render_profile: what `jevfleet serve` hands its
    gateway and workers): the GGUF it was derived from, which stays its source (serving facts,
    calibration record key), and the calibration record its scale and bias were read from. A
    file without it (every hand-written one, and what `jevfleet profile` prints) is not derived."""
    gguf: str = ""
    calibration_record: str = ""


class ProfileFile(Section):
    name: Text
    description: str = ""
    release_date: str = "1970-01-01"
    licence: str = ""
    model: ModelSection = ModelSection()
    prompt: PromptSection
    calibration: CalibrationSection = CalibrationSection()
    head: HeadSection = HeadSection(scale=0.0)
    derived: DerivedSection = DerivedSection()


def refusal(exc: ValidationError) -> str:
    """Every error of a refused file on one line, each naming its key (prompt.yes, head.scale, ...)."""
    def one(error: dict) -> str:
        key = ".".join(str(part) for part in error["loc"])
        message = "unknown key" if error["type"] == "extra_forbidden" else error["msg"]
        return f"{key}: {message.removeprefix('Value error, ')}"

    return "; ".join(one(e) for e in exc.errors())


def _toml_string(text: str) -> str:
    """A TOML basic string, multi-line when the text has lines (a derived preamble then reads as
    the chat it is); quotes, backslashes and control characters escaped, so no delimiter can
    show up inside."""
    def escaped(c: str) -> str:
        if c in '"\\':
            return "\\" + c
        if (ord(c) < 0x20 and c not in "\n\t") or ord(c) == 0x7F:
            return f"\\u{ord(c):04x}"
        return c

    body = "".join(escaped(c) for c in text)
    return f'"""\n{body}"""' if "\n" in text else f'"{body}"'


def _toml_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    return _toml_string(str(value))


def profile_toml(data: dict, header: str = "") -> str:
    """A profile file's text for `data` (ProfileFile's keys: top-level values, then one table per
    section), which tomllib reads back as `data`. `header`: comment lines put first."""
    lines = [f"# {line}".rstrip() for line in header.splitlines()]
    lines += [f"{key} = {_toml_value(value)}" for key, value in data.items() if not isinstance(value, dict)]
    for section, values in data.items():
        if isinstance(values, dict):
            lines += ["", f"[{section}]"] + [f"{key} = {_toml_value(value)}" for key, value in values.items()]
    return "\n".join(lines) + "\n"
