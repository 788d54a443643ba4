"""quality/plain.py: the plain reading a llama-server user would write, on a small chat model
(SmolLM2 135M Instruct): one chat turn, P(yes) from the first token, choice and score skipped."""
from __future__ import annotations

import math

import pytest

from jevfleet.harness.engine import model_of
from quality.items import Item, Skipped
from quality.plain import USER_TURN, PlainRunner
from shared.config import default_settings
from shared.derive import render_chat


def item(id: str, type: str = "noul", answer=True) -> Item:
    return Item(id=id, kind="fact", type=type, state="The parcel arrived on Tuesday.", question="Did the parcel arrive?",
                criteria=None if type == "noul" else ["a", "b"], answer=answer, split="test")


@pytest.mark.model
def test_a_yes_no_item_gets_the_first_tokens_yes_share_and_a_choice_is_skipped():
    profile, gguf = model_of(default_settings(), "smollm2-135m")
    runner = PlainRunner(gguf, profile, threads=2)
    try:
        prompt = render_chat(runner.gguf, [{"role": "user", "content": USER_TURN.format(
            state="S", question="Q")}])
        assert prompt.rstrip().endswith("assistant") and "S\n\nQuestion: Q\nAnswer Yes or No." in prompt
        yes, choice = runner.ask([item("a"), item("b", "choice", "a")])
        assert isinstance(choice, Skipped) and not isinstance(yes, Skipped)
        assert yes.probs[0] == pytest.approx(1 / (1 + math.exp(-yes.margin))) and 0 < yes.probs[0] < 1
        assert runner.margin(item("a")) == yes.margin  # one prompt, one reading: the same bits again
    finally:
        runner.close()
