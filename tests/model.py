"""The default model, loaded once per test session for tests that need the real engine."""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from shared.config import load_settings
from shared.model_files import resolve_model
from shared.profiles import Profile, load_profile
from worker.engine import Engine, Job


@lru_cache(maxsize=1)
def default_model() -> tuple[Profile, Path]:
    settings = load_settings(environ={})
    profile = load_profile(settings.profile)
    return profile, resolve_model(profile, settings.cache_path)


def make_job(engine: Engine, state: str, questions: list[str]) -> Job:
    """A request of the default profile, tokenized like the gateway does."""
    profile, _ = default_model()
    prefix = engine.tokenize(profile.preamble + profile.prefix.format(state=state), add_bos=profile.add_bos)
    suffixes = [engine.tokenize(profile.suffix.format(question=q)) for q in questions]
    yes = sorted({engine.tokenize(w)[0] for w in profile.yes})
    no = sorted({engine.tokenize(w)[0] for w in profile.no})
    return Job(prefix=prefix, suffixes=suffixes, yes_ids=yes, no_ids=no)
