"""Warmup: page the weights in and run the shapes real traffic uses before taking traffic.

The first llama_decode after loading pays for page faults on the mmapped weights and for allocating
compute buffers; doing it before the worker registers keeps that cost off the first real request. A
decode shape seen for the first time later costs nothing extra (the warmup rows of bench/engine.py,
in git at 4a17b4c: the first request of a new length as fast as the second), which is why there is
no idle-time warmup of the remaining shapes any more.
"""
from __future__ import annotations

from shared.profiles import Profile, answer_ids, encode_prefix, encode_suffix
from worker.engine import Engine
from worker.job import Job


def make_job(engine: Engine, profile: Profile, state: str, questions: list[str]) -> Job:
    """A request rendered and tokenized the way the gateway does it (plain-text state, yes/no
    questions): for warmup, tests and benchmarks."""
    return rendered_job(engine, profile, profile.preamble + profile.prefix.format(state=state),
                        [profile.suffix.format(question=q) for q in questions])


def rendered_job(engine: Engine, profile: Profile, prefix: str, suffixes: list[str]) -> Job:
    """A job from prompt texts already rendered (gateway/prompts.py's Rendered: any request,
    a choice too), tokenized as the gateway tokenizes them."""
    yes, no = answer_ids(engine.tokenize, profile.yes), answer_ids(engine.tokenize, profile.no)
    return Job(prefix=encode_prefix(engine.tokenize, profile, prefix),
               suffixes=[encode_suffix(engine.tokenize, profile, text) for text in suffixes], yes_ids=yes, no_ids=no)


def startup_warmup(engine: Engine, profile: Profile) -> None:
    """A request with two questions, then two requests in one batch: every layer and the
    output row are touched, and the piece sizes of typical prompts have run once."""
    engine.run([make_job(engine, profile, "The sky is blue.", ["Is the sky blue?", "Is it raining?"])], warm=True)
    engine.run([make_job(engine, profile, "The parcel arrived on Monday, two days late.", ["Was the parcel late?"]),
                make_job(engine, profile, "Please cancel my order.", ["Does the writer want the order?"])],
               warm=True)
