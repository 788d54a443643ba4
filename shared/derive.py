"""A model profile derived from a GGUF file: what `jevfleet serve --model PATH.gguf` serves when no
profile is named, and what `jevfleet profile PATH.gguf` prints for editing.

- An instruction-tuned file (a `tokenizer.chat_template` in its metadata) is asked in its own chat
  format: the template is rendered with Jinja2 the way llama-cpp-python renders it, for a system
  turn, the few-shot profile's examples as user/assistant turns, and a last user turn holding the
  state and the question. Marker strings stand in for the two, and the rendered text is cut
  around them: the turns before the last are the preamble, the state goes in the prefix and the
  question in the suffix.
- A base model (no template) gets the few-shot profile (FEW_SHOT) with its own file.

Nothing is trusted because the template looked right; each is checked on this file's vocabulary
before the profile is returned, and a failure is a ModelFileError (one line, exit 2):
- the template renders, and keeps the state and the question as given;
- the prefix/suffix cut is a token boundary: tokenizing prefix and suffix alone gives the ids of
  the whole prompt, for every probe (the cut is moved until it is, or the file is refused);
- the yes and the no answer are each one token, the token the model reads after the prompt, and
  distinct: "Yes"/"No" after an assistant turn start, " Yes"/" No" after "Answer:", whichever
  the vocabulary has as single tokens in that place.
The fourth check, that the answers rank better than chance, needs the model: worker/sanity.py.

A derived profile's calibration is fitted on the built-in labelled set where it is first served
(quality/derived.py, which needs the model) and kept in cache_dir/calibration/; serving_profile
reads it back here, so a gateway, which has no model, serves the same scale and bias.

`jevfleet serve` derives the profile once, calibrated, and renders it into cache_dir/profiles/
(render_profile); its gateway and workers get that file's path as their `profile` setting and
load it (shared/profiles.py reads its [derived] section), so they neither derive again nor can
disagree.
"""
from __future__ import annotations

import dataclasses
import datetime
import hashlib
import json
import os
import re
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from shared.config import PROJECT_ROOT, Settings
from shared.gguf_file import GgufFile, ModelFileError, read_gguf
from shared.model_files import file_sha256
from shared.profile_file import ModelSection, ProfileFile, PromptSection, profile_toml, refusal
from shared.profiles import (Profile, ProfileError, encode_prefix, encode_suffix, load_profile,
                             profile_from_file, tokenize_after_text)

FEW_SHOT = "gemma-3-270m"  # a base model's profile; its preamble's examples become a chat's example turns
SYSTEM = "You answer questions about a text with Yes or No."
STATE, QUESTION = "@@JEV-STATE@@", "@@JEV-QUESTION@@"  # stand-ins cut out of the rendered template
# States and questions whose prompts must tokenize the same whole and cut (plain text, as users send)
PROBES = [("The parcel was delivered to the front desk on Tuesday.", "Has the parcel been delivered?"),
          ("Hi", "Is this a greeting?"), ("Order 5521: 2 mugs, 12.50 EUR (paid).", "Was it paid in cash?"),
          ("Ça coûte 30 € — trop cher !", "Is the writer unhappy?")]
FIXED_DATE = datetime.datetime(2026, 1, 1)  # what strftime_now shows a template (see _render)
# The labelled set a derived profile's calibration is fitted on (its fit split's straightforward
# yes/no items, as `jevfleet calibrate` fits a hand-written profile by default): eval/README.md.
CALIBRATION_SET = PROJECT_ROOT / "eval" / "plain.jsonl"
# How much of that set it is fitted on: an item's forward pass costs about the file's layer bytes
# (gguf_file.layer_bytes) times the tokens the item adds to the kept preamble, so the count keeps
# that product: the whole fit split's 832 yes/no items for the two small files here, ~140 for Gemma
# 3 1B at Q4_K_M (463 MiB of layers, 30 tokens an item), and never fewer than CALIBRATION_MIN
# (Llama 3.2 1B: 565 MiB and 29 tokens; MiniCPM 1B: 713 MiB and 58 tokens, its 32k vocabulary cuts
# text finer). Sized for a 1B file's first serve, the one-off shape record and exact reading
# measured in it too, to come near 3 minutes on two cores at ~0.65 s an item: 169 s for Gemma 3 1B
# and 186 s for Llama 3.2 1B (at the floor) on 2026-12-04, against 254 and 231 s with 4,000,000.
# quality/derived.py measures the tokens with the file's vocabulary; the record's key names the rule.
CALIBRATION_WORK = 2_000_000  # items x MiB of layers x tokens an item
CALIBRATION_MIN = 128
CALIBRATION_RULE = f"{CALIBRATION_WORK} item-MiB-tokens, at least {CALIBRATION_MIN} items, every kind alike"


def calibration_size(layer_bytes: int, item_tokens: float) -> int:
    """The most items a derived profile is calibrated on, for a file with `layer_bytes` (gguf_file.
    layer_bytes) whose items add `item_tokens` each on average (CALIBRATION_WORK)."""
    return max(CALIBRATION_MIN, int(CALIBRATION_WORK * 2**20 / max(layer_bytes * item_tokens, 1)))


_EXAMPLE = re.compile(r"Text: (.*)\nQuestion: (.*)\nAnswer: (.*)\n")


def _examples() -> list[tuple[str, str, str]]:
    """(text, question, answer) of the few-shot profile's examples, so both kinds of profile teach
    the same eight cases."""
    return [(t, q, a.strip()) for t, q, a in _EXAMPLE.findall(load_profile(FEW_SHOT).preamble)]


def _escape(text: str) -> str:
    """Template text as str.format reads it (the gateway formats prefix and suffix)."""
    return text.replace("{", "{{").replace("}", "}}")


def _render(gguf: GgufFile, messages: list[dict[str, str]], generation: bool) -> str:
    """The template rendered as llama-cpp-python renders it for a chat, with two changes that keep
    the prompt a pure function of the file: strftime_now gives a fixed date (templates that print
    today's date would otherwise give a gateway and a worker started on different days different
    preambles), and enable_thinking is off (a reasoning template would open a thinking block where
    the answer goes)."""
    from llama_cpp.llama_chat_format import Jinja2ChatFormatter

    formatter = Jinja2ChatFormatter(gguf.chat_template, eos_token=gguf.eos, bos_token=gguf.bos,
                                    add_generation_prompt=generation)
    formatter.strftime_now = lambda fmt: FIXED_DATE.strftime(fmt)  # type: ignore[method-assign]
    return formatter(messages=messages, enable_thinking=False).prompt


def render_chat(gguf: GgufFile, messages: list[dict[str, str]]) -> str:
    """The file's chat template over `messages`, with the generation prompt (as a chat client's)."""
    return _render(gguf, messages, True)


def _conversation(gguf: GgufFile) -> list[dict[str, str]]:
    """The messages of a decision, with a system turn when the template takes one, else its text
    folded into the first user turn (Gemma's templates refuse a system role, some raise)."""
    turns = []
    for text, question, answer in _examples():
        turns += [{"role": "user", "content": f"Text: {text}\nQuestion: {question}"},
                  {"role": "assistant", "content": answer}]
    turns.append({"role": "user", "content": f"Text: {STATE}\nQuestion: {QUESTION}"})
    with_system = [{"role": "system", "content": SYSTEM}] + turns
    folded = [{"role": "user", "content": f"{SYSTEM}\n\n{turns[0]['content']}"}] + turns[1:]
    error: Exception | None = None
    for messages in (with_system, folded):
        try:
            text = _render(gguf, messages, True)
        except Exception as exc:  # a template may raise anything (raise_exception, TypeError, ...)
            error = exc
            continue
        if text.count(STATE) == 1 and text.count(QUESTION) == 1 and text.index(STATE) < text.index(QUESTION):
            return messages
        error = ValueError("it does not keep the user's text as given")
    raise ModelFileError(f"model file {gguf.path}: its chat template does not render "
                         f"({type(error).__name__}: {error})".replace("\n", " "))


def boundary_holds(tokenize, profile: Profile) -> bool:
    """Whether every probe's prefix and suffix, tokenized apart as gateway and worker do, give the
    ids of the whole prompt tokenized at once."""
    for state, question in PROBES:
        prefix = profile.preamble + profile.prefix.format(state=state)
        suffix = profile.suffix.format(question=question)
        whole = tokenize(prefix + suffix, add_bos=profile.add_bos, special=bool(profile.control))
        if encode_prefix(tokenize, profile, prefix) + encode_suffix(tokenize, profile, suffix) != whole:
            return False
    return True


def _answer_words(gguf: GgufFile, prompt: str, special: bool, candidates: list[str]) -> list[str]:
    """The candidates that are one token alone and the same one token read after `prompt`."""
    before = gguf.tokenize(prompt, special=special)
    usable = []
    for word in candidates:
        alone = tokenize_after_text(gguf.tokenize, word)  # as answer_ids reads it
        if len(alone) == 1 and gguf.tokenize(prompt + word, special=special) == before + alone:
            usable.append(word)
    return usable


def _answers(gguf: GgufFile, prompt: str, special: bool, lead: str) -> dict[str, list[str]]:
    """yes and no answer words read after `prompt`: the first of the form the model writes there
    (`lead` in front: "" after an assistant turn start, " " after "Answer:"), the bare word and
    the word after a space that is one token there, with its lowercase form where that is one
    token too; refused when either side has none, or when they share a token."""
    out = {}
    for key, word in (("yes", "Yes"), ("no", "No")):
        forms = list(dict.fromkeys([lead + word, word, " " + word]))
        usable = _answer_words(gguf, prompt, special, forms)
        if not usable:
            raise ModelFileError(f"model file {gguf.path}: no usable {key} token: none of {forms} is one token "
                                 "of its vocabulary where the answer goes")
        out[key] = usable[:1] + _answer_words(gguf, prompt, special, [usable[0].lower()])
    ids = {key: {tokenize_after_text(gguf.tokenize, w)[0] for w in words} for key, words in out.items()}
    if ids["yes"] & ids["no"]:
        raise ModelFileError(f"model file {gguf.path}: no usable yes/no tokens: yes {out['yes']} and "
                             f"no {out['no']} share a token")
    return out


def _chat_prompt(gguf: GgufFile) -> tuple[dict[str, Any], bool]:
    """The [prompt] of a chat-template profile, the cut put where the boundary holds."""
    messages = _conversation(gguf)
    text = _render(gguf, messages, True)
    try:
        history = _render(gguf, messages[:-1], False)
    except Exception:  # a template may insist on ending with a user turn: then no preamble of its own
        history = ""
    preamble = history if text.startswith(history) else ""
    at_state, at_question = text.index(STATE), text.index(QUESTION)
    between = text[at_state + len(STATE):at_question]  # "\nQuestion: "
    control = [c for c in gguf.control if c in text]
    add_bos = gguf.add_bos and not (gguf.bos and text.startswith(gguf.bos))
    base = load_profile(FEW_SHOT)
    cuts = [between.find("\n") + 1] if "\n" in between else []
    for cut in dict.fromkeys(cuts + [len(between), 0]):
        prompt = {
            "control": control, "preamble": preamble,
            "prefix": _escape(text[len(preamble):at_state]) + "{state}" + _escape(between[:cut]),
            "suffix": _escape(between[cut:]) + "{question}" + _escape(text[at_question + len(QUESTION):]),
        }
        candidate = _profile(gguf, _data(gguf, {**_question_words(base), **prompt, "yes": ["Yes"], "no": ["No"]},
                                         add_bos, ""))
        if boundary_holds(gguf.tokenize, candidate):
            return {**prompt, **_answers(gguf, _probe_prompt(candidate), True, "")}, add_bos
    raise ModelFileError(f"model file {gguf.path}: no prefix/suffix cut of its chat template is a token boundary")


def _question_words(base: Profile) -> dict[str, str]:
    """How questions, choices and scores are worded: the few-shot profile's, the same for every model."""
    keys = ("default_question", "true_means", "false_means", "choice_question", "score_question",
            "choice_default", "score_default", "option_described")
    return {key: getattr(base, key) for key in keys}


def _few_shot_prompt(gguf: GgufFile) -> tuple[dict[str, Any], bool]:
    base = load_profile(FEW_SHOT)
    prompt = {"preamble": base.preamble, "prefix": base.prefix, "suffix": base.suffix}
    candidate = _profile(gguf, _data(gguf, {**_question_words(base), **prompt, "yes": list(base.yes),
                                            "no": list(base.no)}, gguf.add_bos, ""))
    if not boundary_holds(gguf.tokenize, candidate):
        raise ModelFileError(f"model file {gguf.path}: the few-shot prompt's prefix/suffix cut is not a token "
                             "boundary of its vocabulary")
    return {**prompt, **_answers(gguf, _probe_prompt(candidate), False, " ")}, gguf.add_bos


def _probe_prompt(profile: Profile) -> str:
    state, question = PROBES[0]
    return profile.preamble + profile.prefix.format(state=state) + profile.suffix.format(question=question)


def _data(gguf: GgufFile, prompt: dict[str, Any], add_bos: bool, how: str) -> dict[str, Any]:
    """The data of a profile file (ProfileFile's keys) for `gguf` with this [prompt]."""
    return {
        "name": gguf.path.stem,
        "description": f"{gguf.name} ({gguf.architecture}), {how}; derived from the file by jevfleet",
        "licence": gguf.licence,
        "model": {"path": str(gguf.path.resolve()), "add_bos": add_bos},
        "prompt": prompt,
        "calibration": {"scale": 1.0, "bias": 0.0},  # uncalibrated: serving fits it (quality/derived.py)
    }


def _profile(gguf: GgufFile, data: dict[str, Any]) -> Profile:
    try:
        raw = ProfileFile.model_validate(data)
    except ValidationError as exc:
        raise ModelFileError(f"model file {gguf.path}: the derived profile is not valid: {refusal(exc)}") from None
    return dataclasses.replace(profile_from_file(raw, gguf.path, head=False), derived=True)


def _derive(path: Path) -> tuple[GgufFile, dict[str, Any]]:
    gguf = read_gguf(path)
    chat = bool(gguf.chat_template)
    prompt, add_bos = _chat_prompt(gguf) if chat else _few_shot_prompt(gguf)
    how = "asked through its chat template" if chat else f"a base model asked with the {FEW_SHOT} few-shot prompt"
    return gguf, _data(gguf, {**prompt, **_question_words(load_profile(FEW_SHOT))}, add_bos, how)


def derive_data(path: Path) -> dict[str, Any]:
    """The derived profile as the data of a profile file (ProfileFile's keys), checked: what
    `jevfleet profile` prints."""
    return _derive(path)[1]


def derive_profile(path: Path) -> Profile:
    """The profile `jevfleet serve --model PATH` serves when no profile is named."""
    return _profile(*_derive(path))


def calibration_record(cache_dir: Path, profile: Profile) -> Path | None:
    """Where the calibration fitted for a derived profile is kept (quality/derived.py writes it):
    named by what its margins depend on, so that another file, prompt, set or llama.cpp build
    never reads a stale one. None when the built-in set is not here (a wheel without eval/)."""
    import llama_cpp

    if not CALIBRATION_SET.is_file():
        return None
    key = json.dumps([file_sha256(profile.source), profile.add_bos, profile.control, profile.preamble,
                      profile.prefix, profile.suffix, profile.yes, profile.no, file_sha256(CALIBRATION_SET),
                      llama_cpp.__version__, CALIBRATION_RULE])
    return cache_dir / "calibration" / f"{profile.source.stem}-{hashlib.sha256(key.encode()).hexdigest()[:16]}.json"


def with_recorded_calibration(profile: Profile, cache_dir: Path) -> Profile:
    """A derived profile with the scale and bias recorded for it, or as it is (uncalibrated)."""
    record = calibration_record(cache_dir, profile)
    if record is None or not record.is_file():
        return profile
    fitted = json.loads(record.read_text())
    return dataclasses.replace(profile, scale=float(fitted["scale"]), bias=float(fitted["bias"]),
                               calibration_record=str(record))


def profile_for(profile: str, model: str, *, cache_dir: Path, default: str, head: bool | None = None) -> Profile:
    """The profile a process serves, from the settings `profile` and `model` and the cache dir. A
    named profile always: hand-written profiles take precedence, with `model` then only replacing
    its GGUF (a profile rendered by render_profile loads as the derived one it was). With none
    named and a `model`, the profile derived from that file (its chat template, or the few-shot
    prompt for a base model), with the calibration recorded for it in `cache_dir` if there is one:
    `cache_dir` is required, so that nothing serves a derived profile uncalibrated by leaving it
    out (derive_profile is the uncalibrated derivation, by name). With neither, `default`.
    `jevfleet serve` derives once and hands its gateway and workers the rendered file."""
    if profile or not model:
        return load_profile(profile or default, head=head)
    if head:
        raise ProfileError(f"a profile derived from {model} has no learned head: write it out with "
                           "`jevfleet profile`, then fit one with `jevfleet calibrate --head --profile FILE`")
    return with_recorded_calibration(derive_profile(Path(model)), cache_dir)


def serving_profile(settings: Settings, *, head: bool | None = None) -> Profile:
    """The profile `settings` serve (profile_for on their profile, model, cache dir and default)."""
    return profile_for(settings.profile, settings.model, cache_dir=settings.cache_path,
                       default=settings.default_profile, head=head)


def rendered_data(profile: Profile) -> dict[str, Any]:
    """A derived profile, calibrated or not, as the data of a profile file (ProfileFile's keys,
    taken from its schema so none is left out) that loads back as this same Profile: its
    [derived] section keeps the GGUF as its source and the calibration record it was read from."""
    if not profile.derived or profile.head:
        raise ValueError(f"profile {profile.name}: only a derived profile (which has no head) is rendered")
    return {
        **{key: getattr(profile, key) for key in ("name", "description", "release_date", "licence")},
        "model": {key: getattr(profile, key) for key in ModelSection.model_fields},
        "prompt": {key: getattr(profile, key) for key in PromptSection.model_fields},
        "calibration": {"scale": profile.scale, "bias": profile.bias},
        "derived": {"gguf": str(profile.source.absolute()), "calibration_record": profile.calibration_record},
    }


def render_profile(profile: Profile, cache_dir: Path) -> Path:
    """The derived `profile` written as a profile file into cache_dir/profiles/, named by its
    content (so a changed derivation or calibration is a new file, never an overwritten one that a
    running process reads) and written atomically: what `jevfleet serve` hands its gateway and
    workers as their `profile` setting, so they load one derivation instead of each deriving."""
    text = profile_toml(rendered_data(profile), f"{profile.name}: the profile derived from {profile.source.name}, "
                        "rendered by `jevfleet serve` for its gateway and workers\n(shared/derive.render_profile). "
                        "Not for editing: `jevfleet profile FILE.gguf` prints an editable one.")
    path = (cache_dir / "profiles" / f"{profile.name}-{hashlib.sha256(text.encode()).hexdigest()[:16]}.toml").absolute()
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(text)
        os.replace(tmp, path)
    return path
