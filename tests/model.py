"""The default model, loaded once per test session for tests that need the real engine."""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any

from shared.config import default_settings
from shared.model_files import resolve_model
from shared.profiles import Profile, load_profile, preamble_tokens
from worker import warmup
from worker.engine import Engine, Job


@lru_cache(maxsize=1)
def default_model() -> tuple[Profile, Path]:
    return model_of(default_settings().profile)


def model_of(profile_name: str) -> tuple[Profile, Path]:
    """A profile and its GGUF, found as a worker finds it."""
    profile = load_profile(profile_name)
    return profile, resolve_model(profile, default_settings().cache_path)


def make_job(engine: Engine, state: str, questions: list[str]) -> Job:
    """A request of the default profile, tokenized like the gateway does."""
    return warmup.make_job(engine, default_model()[0], state, questions)


def fresh_engine(**settings: Any) -> Engine:
    """An engine on the default model, 2 threads, the default settings but for `settings` (ctx,
    state_cache ...): nothing pinned, nothing kept."""
    return Engine.from_settings(default_model()[1], default_settings(**settings), threads=2)


def pinned_engine(**settings: Any) -> Engine:
    """The same with the profile's preamble pinned, as a worker starts."""
    engine = fresh_engine(**settings)
    engine.pin(preamble_tokens(engine.tokenize, default_model()[0]))
    return engine
