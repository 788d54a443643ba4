"""The default model, loaded once per test session for tests that need the real engine."""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from shared.config import load_settings
from shared.model_files import resolve_model
from shared.profiles import Profile, load_profile, preamble_tokens
from worker import warmup
from worker.engine import Engine, Job


@lru_cache(maxsize=1)
def default_model() -> tuple[Profile, Path]:
    return model_of(load_settings(environ={}).profile)


def model_of(profile_name: str) -> tuple[Profile, Path]:
    """A profile and its GGUF, found as a worker finds it."""
    profile = load_profile(profile_name)
    return profile, resolve_model(profile, load_settings(environ={}).cache_path)


def make_job(engine: Engine, state: str, questions: list[str]) -> Job:
    """A request of the default profile, tokenized like the gateway does."""
    return warmup.make_job(engine, default_model()[0], state, questions)


def pinned_engine(*, ctx: int, state_cache: int, state_cache_tokens: int) -> Engine:
    """An engine on the default model with the profile's preamble pinned, as a worker starts."""
    profile, path = default_model()
    engine = Engine(path, ctx=ctx, threads=2, state_cache=state_cache, state_cache_tokens=state_cache_tokens)
    engine.pin(preamble_tokens(engine.tokenize, profile))
    return engine
