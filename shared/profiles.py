"""Model profiles (conf/models/*.toml): the GGUF, the prompt shape, the answer tokens, calibration.

Gateway and worker load the same profile; the gateway renders and tokenizes prompts from it,
the worker only needs the GGUF. Keeping prompt knowledge in one file is what lets a user point
the fleet at another GGUF without touching code.
"""
from __future__ import annotations

import dataclasses
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from pydantic import ValidationError

from shared.config import CONF_DIR
from shared.profile_file import ProfileFile, refusal


@dataclass(frozen=True, kw_only=True)
class Profile:
    name: str
    description: str
    release_date: str
    licence: str
    package: str
    package_file: str  # a GGUF shipped whole inside `package` (used in place, never imported)
    parts: tuple[str, ...] = ()  # or chunks in several packages, joined once (shared/model_files.py)
    sha256: str = ""  # of the joined parts
    path: str
    add_bos: bool
    control: tuple[str, ...]  # control-token texts of a chat template, parsed in template text only
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
    scale: float  # the calibration of the margin the workers send (the head's when head is set)
    bias: float
    head: str  # the learned head's file (worker/head.py), "" = the plain yes−no margin
    source: Path
    derived: bool = False  # derived from the GGUF (shared/derive.py), not written by hand
    calibration_record: str = ""  # a derived profile's: the file its scale and bias came from, "" = none


def profile_path(name_or_path: str) -> Path:
    candidate = Path(name_or_path)
    if candidate.suffix == ".toml":
        return candidate
    return CONF_DIR / "models" / f"{name_or_path}.toml"


HEAD_CHOICES: dict[str, bool | None] = {"profile": None, "on": True, "off": False}  # --head: load_profile's head


class ProfileError(ValueError):
    """A profile file that cannot be served, in one line naming the file and the key."""


def load_profile(name_or_path: str, *, head: bool | None = None) -> Profile:
    """head: None = as the profile says ([head] enabled), False = without it, True = with it.
    The file is read through its schema (shared/profile_file.py): ProfileError names what is wrong."""
    path = profile_path(name_or_path)
    if not path.is_file():
        raise FileNotFoundError(f"no model profile {name_or_path!r} (looked for {path})")
    try:
        with path.open("rb") as fh:
            raw = ProfileFile.model_validate(tomllib.load(fh))
    except tomllib.TOMLDecodeError as exc:
        raise ProfileError(f"profile {path}: not TOML: {exc}") from None
    except ValidationError as exc:
        raise ProfileError(f"profile {path}: {refusal(exc)}") from None
    return profile_from_file(raw, path, head=head)


def profile_from_file(raw: ProfileFile, source: Path, *, head: bool | None = None) -> Profile:
    """The Profile of a checked profile file; `source` is the file it came from (a .toml, or the
    GGUF a profile was derived from: shared/derive.py), named in errors and digested in the
    serving facts."""
    use_head = raw.head.enabled if head is None else head
    if use_head and not raw.head.file:
        raise ProfileError(f"profile {source}: head.file is empty (fit one with `jevfleet calibrate --head`)")
    cal = raw.head if use_head else raw.calibration  # the head's logit has a calibration of its own
    prompt = raw.prompt
    profile = Profile(
        name=raw.name, description=raw.description, release_date=raw.release_date, licence=raw.licence,
        package=raw.model.package, package_file=raw.model.package_file, parts=raw.model.parts,
        sha256=raw.model.sha256, path=raw.model.path,
        add_bos=raw.model.add_bos, control=prompt.control, preamble=prompt.preamble, prefix=prompt.prefix,
        suffix=prompt.suffix, default_question=prompt.default_question, true_means=prompt.true_means,
        false_means=prompt.false_means, choice_question=prompt.choice_question,
        score_question=prompt.score_question, choice_default=prompt.choice_default,
        score_default=prompt.score_default, option_described=prompt.option_described, yes=prompt.yes,
        no=prompt.no, scale=cal.scale, bias=cal.bias,
        head=str(source.parent / raw.head.file) if use_head else "", source=source,
    )
    if raw.derived.gguf:  # a derived profile rendered to a file (shared/derive.render_profile): as derived
        return dataclasses.replace(profile, source=Path(raw.derived.gguf), derived=True,
                                   calibration_record=raw.derived.calibration_record)
    return profile


def answer_ids(tokenize: Callable[..., list[int]], words: tuple[str, ...]) -> list[int]:
    """The token id of each answer word (a profile's yes or no), sorted and distinct: every word
    must be exactly one token of the vocabulary, or the readout would score the first piece of
    a longer word. The one place gateway, worker and serving facts get them from."""
    ids = []
    for word in words:
        tokens = tokenize_after_text(tokenize, word)  # an answer is read after the prompt
        if len(tokens) != 1:
            raise ProfileError(f"answer word {word!r} is {len(tokens)} tokens of this model's vocabulary, not one")
        ids.append(tokens[0])
    return sorted(set(ids))


def tokenize_after_text(tokenize: Callable[..., list[int]], text: str, *, special: bool = False) -> list[int]:
    """Token ids of `text` as they read after other plain text, not at a prompt's start. llama.cpp
    puts a space in front of a text's start (and after each control token) for a SentencePiece
    vocabulary that adds a space prefix (Llama 2, Phi-3: "\n" alone is "▁", "\n"), so a suffix
    tokenized alone would start with a token the whole prompt does not have. Such a vocabulary is
    known by "\n" being two tokens: the text is then read after a newline (a byte token that
    merges with nothing there) and the newline's ids taken off. Other vocabularies: as it is."""
    def read(piece: str) -> list[int]:
        return tokenize(piece, special=True) if special else tokenize(piece)

    lead = tokenize("\n")
    if len(lead) == 1:
        return read(text)
    ids = read("\n" + text)
    return ids[len(lead):] if ids[:len(lead)] == lead else read(text)


def _strips(tokenize: Callable[..., list[int]], controls: list[str], beside: str, space: str, side: int) -> bool:
    """Whether the control token at the end (side 1) or start (side -1) of `beside` drops `space`
    next to it: llama.cpp does for tokens marked rstrip/lstrip, so the text after (before) such a
    token reads without it, and the cut must be moved past it."""
    token = next(c for c in controls if (beside.endswith(c) if side == 1 else beside.startswith(c)))
    return tokenize(token + space if side == 1 else space + token, special=True) == tokenize(token, special=True)


def _encode(tokenize: Callable[..., list[int]], profile: Profile, text: str, head: str, tail: str,
            add_bos: bool, after_text: bool) -> list[int]:
    """head + user text + tail, with control tokens parsed only in head up to its last control
    token and in tail from its first one: the cuts fall where llama.cpp splits text anyway, so
    the ids are those of the whole text with its template's control tokens parsed. `after_text`:
    the text continues a prompt (a suffix), so its first piece is read as after plain text."""
    if not (text.startswith(head) and text.endswith(tail) and len(text) >= len(head) + len(tail)):
        raise ValueError("text was not rendered from this profile's template")
    start = max((head.rfind(c) + len(c) for c in profile.control if c in head), default=0)
    end = len(text) - len(tail) + min((tail.find(c) for c in profile.control if c in tail), default=len(tail))
    # whitespace that a control token strips (Phi-3's <|user|>, <|end|>) goes with the token
    after = head[start:][:len(head[start:]) - len(head[start:].lstrip())]
    if start and after and _strips(tokenize, profile.control, text[:start], after, 1):
        start += len(after)
    before = text[len(text) - len(tail):end]
    before = before[len(before.rstrip()):]
    if end < len(text) and before and _strips(tokenize, profile.control, text[end:], before, -1):
        end -= len(before)
    ids: list[int] = []
    first = True
    for piece, special in ((text[:start], True), (text[start:end], False), (text[end:], True)):
        if not piece:
            continue
        if first and after_text:
            ids = tokenize_after_text(tokenize, piece, special=special)
        else:
            ids += tokenize(piece, add_bos=add_bos and first, special=special)
        first = False
    return ids


def encode_prefix(tokenize: Callable[..., list[int]], profile: Profile, text: str) -> list[int]:
    """Token ids of a rendered prefix (preamble + prefix with the state in it). tokenize is
    shared/llama.tokenize bound to a vocabulary. A profile with `control` tokens has its
    template's (e.g. "<|im_start|>") parsed, and the state read as plain text whatever it holds."""
    if not profile.control:
        return tokenize(text, add_bos=profile.add_bos)
    head, _, tail = profile.prefix.partition("{state}")
    return _encode(tokenize, profile, text, profile.preamble + head, tail, profile.add_bos, False)


def encode_suffix(tokenize: Callable[..., list[int]], profile: Profile, text: str) -> list[int]:
    """Token ids of a rendered suffix (one question), as encode_prefix does it."""
    if not profile.control:
        return tokenize_after_text(tokenize, text)
    head, _, tail = profile.suffix.partition("{question}")
    return _encode(tokenize, profile, text, head, tail, False, True)


def preamble_tokens(tokenize: Callable[..., list[int]], profile: Profile) -> list[int]:
    """The tokens every prompt of `profile` starts with: the preamble as it tokenizes in front
    of a state (the boundary token may merge), found as the common prefix of two prompts.
    Workers keep them read; the gateway does not count them as queued work."""
    a = encode_prefix(tokenize, profile, profile.preamble + profile.prefix.format(state="alpha"))
    b = encode_prefix(tokenize, profile, profile.preamble + profile.prefix.format(state="Zulu 9"))
    same = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    return a[:same]


def prefix_encoder(tokenize: Callable[..., list[int]], profile: Profile,
                   vocab_contains: Callable[[bytes], bool]) -> Callable[[str], list[int]]:
    """encode_prefix for `profile`, with the preamble's ids computed once where that gives the
    same ids: the preamble is most of a short request's prompt (236 of ~260 tokens in a W1
    request), and reading it again took ~0.9 of the gateway's 1.1 ms tokenizing such a prompt.

    The text after the preamble is then tokenized alone. That is exact when no token can span the
    cut: no token's text holds the preamble's last character and the template's first (the same
    two in every prompt), or the template starts with a control token, where llama.cpp splits the
    text anyway. A few probes, tokenized both ways, must also agree (a tokenizer that put a space
    in front of every text would fail them). Otherwise the whole text is tokenized each time."""
    def whole(text: str) -> list[int]:
        return encode_prefix(tokenize, profile, text)

    preamble, template = profile.preamble, profile.prefix
    if not preamble or not template:
        return whole
    at_control = any(template.startswith(c) for c in profile.control)
    if not at_control and vocab_contains((preamble[-1] + template[0]).encode("utf-8")):
        return whole
    kept = tokenize(preamble, add_bos=profile.add_bos, special=bool(profile.control))
    rest = dataclasses.replace(profile, preamble="", add_bos=False)

    def with_kept_preamble(text: str) -> list[int]:
        if not text.startswith(preamble):
            return whole(text)  # not a rendered prefix: whole() says so
        return kept + encode_prefix(tokenize, rest, text[len(preamble):])

    probes = [preamble + template.format(state=s) for s in ("alpha", "Zulu 9", "", "\n  x", "<b>")]
    return with_kept_preamble if all(with_kept_preamble(p) == whole(p) for p in probes) else whole
