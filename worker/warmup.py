"""Warmup: page the weights in and run the shapes real traffic uses before taking traffic.

The first llama_decode after loading pays for page faults on the mmapped weights and for
allocating compute buffers; doing it before the worker registers keeps that cost off the first
real request.
"""
from __future__ import annotations

from shared.profiles import Profile
from worker.engine import Engine, Job


def startup_warmup(engine: Engine, profile: Profile) -> None:
    prefix = engine.tokenize(profile.preamble + profile.prefix.format(state="The sky is blue."),
                             add_bos=profile.add_bos)
    suffix = engine.tokenize(profile.suffix.format(question="Is the sky blue?"))
    yes = [engine.tokenize(profile.yes[0])[0]]
    no = [engine.tokenize(profile.no[0])[0]]
    engine.run([Job(prefix=prefix, suffixes=[suffix, suffix], yes_ids=yes, no_ids=no)])
