"""shared/serving.py: the facts a worker states about what it serves, and how they are compared."""
from __future__ import annotations

from shared.profiles import load_profile
from shared.serving import fingerprint, mismatch, serving_facts

PROFILE = load_profile("gemma-3-270m")


WORDS = {word: 1000 + n for n, word in enumerate((*PROFILE.yes, *PROFILE.no))}  # one token each, as answer words must be


def by_characters(text: str, add_bos: bool = False) -> list[int]:
    return ([1] if add_bos else []) + ([WORDS[text]] if text in WORDS else [ord(c) for c in text])


def facts(**changes) -> dict[str, str]:
    args = dict(profile=PROFILE, model_sha256="a" * 64, mode="deterministic", tokenize=by_characters)
    return serving_facts(**{**args, **changes})


def test_the_same_inputs_give_the_same_facts_and_no_mismatch():
    assert facts() == facts()
    assert mismatch(facts(), facts()) is None
    assert facts()["profile"].startswith("gemma-3-270m:")


def test_each_fact_that_differs_is_named_with_both_values():
    assert mismatch(facts(), facts(mode="fast")) == "mode is 'fast', the gateway's is 'deterministic'"
    reason = mismatch(facts(), facts(model_sha256="b" * 64, mode="fast"))
    assert reason.startswith("model_sha256 is 'bbbb") and "; mode is 'fast'" in reason


def test_another_tokenizer_is_a_mismatch():
    other = facts(tokenize=lambda text, add_bos=False: by_characters(text.lower(), add_bos))
    assert mismatch(facts(), other).startswith("tokens is ")


def test_a_worker_that_states_nothing_is_a_mismatch():
    assert "is 'not stated'" in mismatch(facts(), {})


def test_a_worker_with_the_learned_head_on_is_a_mismatch_for_a_gateway_without_it():
    with_head = facts(profile=load_profile("gemma-3-270m", head=True))
    assert facts()["head"] == "none" and len(with_head["head"]) == 16
    assert mismatch(facts(), with_head) == f"head is {with_head['head']!r}, the gateway's is 'none'"


def test_the_fingerprint_labels_profile_gguf_and_mode():
    assert fingerprint(facts()) == f"gemma-3-270m:{'a' * 16}:deterministic"
    assert fingerprint(facts(mode="fast")) != fingerprint(facts())
