"""shared/profiles.prefix_encoder: the preamble's ids kept only where that gives the ids of the
whole text. Fast tier: a toy tokenizer (one id per character, or per merged pair) stands in for
llama.cpp's; tests/test_tokenizer.py checks the rule on both real vocabularies."""
from __future__ import annotations

import dataclasses

import pytest

from jevfleet.cli import main
from shared.config import PROJECT_ROOT
from shared.profiles import ProfileError, answer_ids, encode_prefix, load_profile, prefix_encoder

PROFILE = dataclasses.replace(load_profile("gemma-3-270m"), preamble="Text: a\nAnswer: Yes\n\n")
PROMPT = PROFILE.preamble + PROFILE.prefix.format(state="The parcel came late.")


class Toy:
    """One id per character, except `merged` pairs, which become one id (as a BPE merge would);
    `lead` is put in front of every text (as a tokenizer adding a space prefix would). Records the
    texts it was given."""

    def __init__(self, merged: tuple[str, ...] = (), lead: str = ""):
        self.merged, self.lead, self.texts = merged, lead, []

    def __call__(self, text: str, *, add_bos: bool = False, special: bool = False) -> list[int]:
        self.texts.append(text)
        text, ids, i = self.lead + text, [1] if add_bos else [], 0
        while i < len(text):
            pair = text[i:i + 2] in self.merged
            ids.append(hash(text[i:i + 2]) if pair else ord(text[i]))
            i += 2 if pair else 1
        return ids

    def contains(self, fragment: bytes) -> bool:
        return any(fragment.decode() in pair for pair in self.merged)


def test_the_preamble_is_tokenized_once_when_no_token_spans_the_cut():
    toy = Toy(merged=("Te", "ce"))
    encode = prefix_encoder(toy, PROFILE, toy.contains)
    toy.texts.clear()
    assert encode(PROMPT) == encode_prefix(toy, PROFILE, PROMPT)
    assert toy.texts[0] == PROMPT[len(PROFILE.preamble):]


def test_a_token_that_could_span_the_cut_keeps_whole_prompts_tokenized():
    toy = Toy(merged=("\nT",))  # the preamble's last character and the template's first
    encode = prefix_encoder(toy, PROFILE, toy.contains)
    toy.texts.clear()
    assert encode(PROMPT) == encode_prefix(toy, PROFILE, PROMPT) and toy.texts[0] == PROMPT


def test_a_tokenizer_that_changes_the_start_of_each_text_keeps_whole_prompts_tokenized():
    toy = Toy(lead="_")  # the two halves would each get one: the probes disagree
    encode = prefix_encoder(toy, PROFILE, toy.contains)
    toy.texts.clear()
    assert encode(PROMPT) == encode_prefix(toy, PROFILE, PROMPT) and toy.texts[0] == PROMPT


# --- the profile file's schema (shared/profile_file.py) and the answer words --------------------

GEMMA = (PROJECT_ROOT / "conf" / "models" / "gemma-3-270m.toml").read_text()


def broken(tmp_path, old: str, new: str) -> str:
    """The default profile with one edit, as a file; its path."""
    assert old in GEMMA
    path = tmp_path / "broken.toml"
    path.write_text(GEMMA.replace(old, new, 1))
    return str(path)


@pytest.mark.parametrize("old, new, says", [
    ('yes = [" Yes", " yes"]', 'yse = [" Yes", " yes"]', "prompt.yse: unknown key"),
    ("[calibration]\n", "[calibraton]\n", "calibraton: unknown key"),
    ('prefix = "Text: {state}\\nQuestion:"', 'prefix = "Text: \\nQuestion:"', "prompt.prefix: must contain {state}"),
    ('suffix = " {question}\\nAnswer:"', 'suffix = " {q}\\nAnswer:"', "prompt.suffix: must contain {question}"),
    ("scale = 0.466", "scale = -0.5", "calibration.scale: Input should be greater than or equal to 0"),
    ("bias = -0.0718", "bias = inf", "calibration.bias: must be a finite number"),
    ('no = [" No", " no"]', 'no = [" No", " yes"]', "prompt: yes and no share [' yes']"),
    ('no = [" No", " no"]', "no = []", "prompt.no: Tuple should have at least 1 item"),
    ("add_bos = true", 'add_bos = "maybe"', "model.add_bos: Input should be a valid boolean"),
    ('name = "gemma-3-270m"', "", "name: Field required"),
])
def test_a_bad_profile_is_refused_in_one_line_naming_the_key(tmp_path, old, new, says):
    with pytest.raises(ProfileError) as refused:
        load_profile(broken(tmp_path, old, new))
    message = str(refused.value)
    assert says in message and "\n" not in message and message.startswith(f"profile {tmp_path}")


def test_a_profile_that_is_not_toml_or_has_no_head_file_is_refused(tmp_path):
    with pytest.raises(ProfileError, match="not TOML"):
        load_profile(broken(tmp_path, "[calibration]", "[calibration"))
    with pytest.raises(ProfileError, match="head.file is empty"):
        load_profile(broken(tmp_path, 'file = "gemma-3-270m.head.npz"', 'file = ""'), head=True)


def test_every_shipped_profile_loads():
    for path in sorted((PROJECT_ROOT / "conf" / "models").glob("*.toml")):
        assert load_profile(str(path)).name == path.stem


def test_an_answer_word_must_be_one_token():
    assert answer_ids(Toy(), ("Y", "y", "Y")) == sorted({ord("Y"), ord("y")})
    with pytest.raises(ProfileError, match="answer word ' Yes' is 4 tokens of this model's vocabulary, not one"):
        answer_ids(Toy(), (" Yes",))


def test_the_cli_refuses_a_bad_profile_with_exit_2_and_one_line(tmp_path, capsys):
    request = tmp_path / "r.json"
    request.write_text('{"model": "jev-latest", "state": "s", "questions": {"q": {"type": "noul"}}}')
    assert main(["decide", str(request), "--profile", broken(tmp_path, "add_bos = true", "add_bos = 2")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("jevfleet decide: profile ") and "model.add_bos" in err and "\n" not in err
