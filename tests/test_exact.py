"""worker/exact.py on the real default model: llama.cpp's exact reading (F32 K/V, no flash
attention) is a property of the tokens, not of how they are cut into llama_decode calls, and it
refuses a prompt longer than its context."""
from __future__ import annotations

from functools import partial

import pytest

from jevfleet.harness.engine import default_model
from shared.llama import llama, load_model, tokenize
from shared.profiles import answer_ids
from worker.exact import MAX_TOKENS, ExactReader

pytestmark = pytest.mark.model


@pytest.fixture(scope="module")
def reader() -> ExactReader:
    profile, path = default_model()
    model = load_model(path)
    vocab = llama().llama_model_get_vocab(model)
    words = partial(tokenize, vocab)
    reader = ExactReader(model, threads=2, yes=answer_ids(words, profile.yes), no=answer_ids(words, profile.no))
    reader.prompt = tokenize(vocab, profile.preamble + profile.prefix.format(state="The kettle arrived broken.")
                             + profile.suffix.format(question="Is the kettle damaged?"), add_bos=profile.add_bos)
    reader.model = model
    yield reader
    reader.close()
    llama().llama_model_free(model)


def test_the_exact_reading_does_not_depend_on_the_cut(reader):
    whole = reader.margin(reader.prompt)
    assert reader.margin(reader.prompt) == whole  # the same context read again
    assert reader.margin(reader.prompt, pieces=60) == pytest.approx(whole, abs=1e-3)  # F32 sums in other orders
    assert reader.margin(reader.prompt, pieces=60, pad=False) == pytest.approx(whole, abs=1e-3)


def test_a_prompt_longer_than_the_reader_takes_is_refused(reader):
    with pytest.raises(ValueError, match="1 to"):
        reader.margin(reader.prompt * (MAX_TOKENS // len(reader.prompt) + 1))


def test_a_reader_sized_for_longer_prompts_takes_them(reader):
    """The start-up canary sizes its reader to its prompts (608 tokens with MiniCPM's template)."""
    longer = (reader.prompt * (MAX_TOKENS // len(reader.prompt) + 1))[:MAX_TOKENS + 96]
    wide = ExactReader(reader.model, threads=2, yes=reader.yes, no=reader.no, longest=MAX_TOKENS + 128)
    try:
        assert wide.margin(longer) == wide.margin(longer)  # read, and read alike again
        assert wide.margin(reader.prompt) == reader.margin(reader.prompt)  # the size changes no reading
    finally:
        wide.close()
