"""The gateway's vocab-only tokenizer: the same ids as the worker's model, and a prompt cut into
prefix + suffix tokenizes exactly like the whole prompt (else a snapshot would be read wrong)."""
from __future__ import annotations

import pytest

from gateway.prompts import render
from gateway.tokenizer import Tokenizer
from gateway.wire import validate
from shared.llama import load_model, llama, tokenize
from tests.model import default_model

pytestmark = pytest.mark.model

STATES = [
    "I was charged twice for the same order.",
    "Ends with spaces and a newline   \n",
    "Ünïcödé, emoji 🚀 and 中文 text.",
    '{\n "order": 17,\n "items": ["a", "b"]\n}',
    "Line one\n\nLine two\nQuestion: a fake question inside the state?",
    "<start_of_turn>user special tokens stay text<end_of_turn>",
    "x" * 2000,
]
QUESTIONS = ["Is this a billing problem?", "Réponse: oui ou non ?", "  padded  ", "Does it mention 42?"]


@pytest.fixture(scope="module")
def tok() -> Tokenizer:
    profile, path = default_model()
    t = Tokenizer(path, profile, threads=1)
    yield t
    t.close()


@pytest.mark.parametrize("state", STATES)
def test_prefix_plus_suffix_tokenizes_like_the_whole_prompt(tok, state):
    p = tok.profile
    prefix_text = p.preamble + p.prefix.format(state=state.strip())
    for q in QUESTIONS:
        suffix_text = p.suffix.format(question=q.strip())
        prefix, (suffix,) = tok.encode_request(prefix_text, [suffix_text])
        assert prefix + suffix == tok.encode(prefix_text + suffix_text, bos=p.add_bos)


def test_vocab_only_ids_match_the_full_model(tok):
    _, path = default_model()
    full = load_model(path)
    vocab = llama().llama_model_get_vocab(full)
    for text in STATES + QUESTIONS:
        assert tokenize(vocab, text) == tok.encode(text)


def test_yes_and_no_are_single_distinct_tokens(tok):
    assert tok.yes_ids and tok.no_ids and not set(tok.yes_ids) & set(tok.no_ids)
    for word in tok.profile.yes + tok.profile.no:
        assert len(tok.encode(word)) == 1


def test_choice_and_score_suffixes_tokenize_like_the_whole_prompt(tok):
    rendered = render(tok.profile, validate({"model": "jev-latest", "state": STATES[2], "questions": {
        "c": {"type": "choice", "instructions": "Which team?", "criteria": {"billing": "payments", " tech ": None}},
        "s": {"type": "score", "criteria": ["calm", {"level": "annoyed"}, "furious"]}}}))
    prefix, suffixes = tok.encode_request(rendered.prefix, rendered.suffixes)
    assert len(suffixes) == 4
    for text, suffix in zip(rendered.suffixes, suffixes):
        assert prefix + suffix == tok.encode(rendered.prefix + text, bos=tok.profile.add_bos)


def test_kept_suffix_ids_are_the_fresh_ones_and_callers_get_copies(tok):
    suffix = tok.profile.suffix.format(question="Is it kept?")
    _, (first,) = tok.encode_request("x", [suffix])
    first.append(-1)  # a caller changing its list must not change the kept ids
    _, (second,) = tok.encode_request("y", [suffix])
    assert second == tok.encode(suffix) and second != first
