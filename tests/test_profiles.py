"""shared/profiles.prefix_encoder: the preamble's ids kept only where that gives the ids of the
whole text. Fast tier: a toy tokenizer (one id per character, or per merged pair) stands in for
llama.cpp's; tests/test_tokenizer.py checks the rule on both real vocabularies."""
from __future__ import annotations

import dataclasses

from shared.profiles import encode_prefix, load_profile, prefix_encoder

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
