"""Warmup: page the weights in and run the shapes real traffic uses before taking traffic, then
use idle time for the decode shapes not seen yet.

The first llama_decode after loading pays for page faults on the mmapped weights and for
allocating compute buffers; doing it before the worker registers keeps that cost off the first
real request. Whether a decode shape seen for the first time later costs anything extra with
llama.cpp is what bench/engine.py measures; idle warmup is kept small and never delays a
request by more than the rest of one graph node (the warm call is aborted when work arrives).
"""
from __future__ import annotations

from typing import Callable

from shared.profiles import Profile, encode_prefix, encode_suffix
from worker.engine import Engine
from worker.job import Job

IDLE_GRACE_S = 0.5  # empty-queue time before idle warmup starts
WARM_ROWS = 60  # longest warm call: every deterministic-mode shape; fast mode's longer ones are skipped


def make_job(engine: Engine, profile: Profile, state: str, questions: list[str]) -> Job:
    """A request rendered and tokenized the way the gateway does it (plain-text state, yes/no
    questions): for warmup, tests and benchmarks."""
    return rendered_job(engine, profile, profile.preamble + profile.prefix.format(state=state),
                        [profile.suffix.format(question=q) for q in questions])


def rendered_job(engine: Engine, profile: Profile, prefix: str, suffixes: list[str]) -> Job:
    """A job from prompt texts already rendered (gateway/prompts.py's Rendered: any request,
    a choice too), tokenized as the gateway tokenizes them."""
    yes = sorted({engine.tokenize(w)[0] for w in profile.yes})
    no = sorted({engine.tokenize(w)[0] for w in profile.no})
    return Job(prefix=encode_prefix(engine.tokenize, profile, prefix),
               suffixes=[encode_suffix(engine.tokenize, profile, text) for text in suffixes], yes_ids=yes, no_ids=no)


def startup_warmup(engine: Engine, profile: Profile) -> None:
    """A request with two questions, then two requests in one batch: every layer and the
    output row are touched, and the piece sizes of typical prompts have run once."""
    engine.run([make_job(engine, profile, "The sky is blue.", ["Is the sky blue?", "Is it raining?"])], warm=True)
    engine.run([make_job(engine, profile, "The parcel arrived on Monday, two days late.", ["Was the parcel late?"]),
                make_job(engine, profile, "Please cancel my order.", ["Does the writer want the order?"])],
               warm=True)


class IdleWarmup:
    """The scheduler's idle hook: one short warm call per invocation, for the next decode shape
    (rows per llama_decode, at most WARM_ROWS) that a prompt of 1..max_length new tokens would
    use and that has not run yet."""

    def __init__(self, engine: Engine, *, max_length: int, stop: Callable[[], bool]) -> None:
        self.engine = engine
        self.stop = stop
        self.shapes = sorted({rows for n in range(1, max_length + 1) for rows in engine.decode_shapes(n)
                              if rows <= WARM_ROWS})
        self.calls = 0
        self.aborted = 0

    def remaining(self) -> list[int]:
        return [rows for rows in self.shapes if rows not in self.engine.seen_shapes]

    def __call__(self) -> bool:
        """Run one warm call; True while shapes remain."""
        todo = self.remaining()
        if not todo:
            return False
        self.calls += 1
        if not self.engine.warm_call(todo[0], self.stop):
            self.aborted += 1
        return len(self.remaining()) > 0
