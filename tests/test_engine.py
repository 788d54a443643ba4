"""The llama.cpp engine on the real default model: answers, and their independence from how
a request was batched or cut (deterministic mode)."""
from __future__ import annotations

import math

import pytest

from tests.model import default_model
from worker.engine import Engine, Job


@pytest.fixture(scope="module")
def engine() -> Engine:
    _, path = default_model()
    return Engine(path, ctx=2048, threads=2)


def make_job(engine: Engine, state: str, questions: list[str]) -> Job:
    profile, _ = default_model()
    prefix = engine.tokenize(profile.preamble + profile.prefix.format(state=state), add_bos=profile.add_bos)
    suffixes = [engine.tokenize(profile.suffix.format(question=q)) for q in questions]
    yes = sorted({engine.tokenize(w)[0] for w in profile.yes})
    no = sorted({engine.tokenize(w)[0] for w in profile.no})
    return Job(prefix=prefix, suffixes=suffixes, yes_ids=yes, no_ids=no)


def test_every_suffix_gets_a_finite_margin(engine):
    job = make_job(engine, "The order shipped on Monday.", ["Has the order shipped?", "Was it cancelled?"])
    read = engine.run([job])
    assert read == len(job.prefix) + sum(map(len, job.suffixes))
    assert len(job.margins) == 2 and all(math.isfinite(m) for m in job.margins)


def test_answer_is_bit_identical_alone_and_batched_with_others(engine):
    alone = make_job(engine, "My card was charged twice.", ["Is this about billing?"])
    engine.run([alone])
    mates = [make_job(engine, "The app crashes at start.", ["Is the app broken?", "Is it slow?"]),
             make_job(engine, "Where is my parcel? It is a week late.", ["Is the parcel late?"])]
    again = make_job(engine, "My card was charged twice.", ["Is this about billing?"])
    engine.run([mates[0], again, mates[1]])
    assert again.margins == alone.margins


def test_same_request_twice_gives_the_same_answer(engine):
    a = make_job(engine, "The invoice is overdue.", ["Is the invoice overdue?"])
    b = make_job(engine, "The invoice is overdue.", ["Is the invoice overdue?"])
    engine.run([a])
    engine.run([b])
    assert a.margins == b.margins


def test_a_one_token_suffix_is_read_like_the_same_prompt_cut_elsewhere(engine):
    full = make_job(engine, "The door is open.", ["Is the door open?"])
    tokens = full.prefix + full.suffixes[0]
    short = Job(prefix=tokens[:-1], suffixes=[tokens[-1:]], yes_ids=full.yes_ids, no_ids=full.no_ids)
    engine.run([full])
    engine.run([short])
    assert short.margins == full.margins


def test_more_suffixes_than_one_wave_holds_are_all_answered(engine):
    questions = [f"Is the number {i} mentioned?" for i in range(70)]
    many = make_job(engine, "The numbers 3, 17 and 42 are listed.", questions)
    engine.run([many])
    assert len(many.margins) == 70 and all(math.isfinite(m) for m in many.margins)
    for i in (0, 17, 69):
        one = make_job(engine, "The numbers 3, 17 and 42 are listed.", [questions[i]])
        engine.run([one])
        assert one.margins[0] == many.margins[i]
