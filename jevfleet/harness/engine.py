"""The model as a worker finds it and an engine as a worker builds it (worker.process.build_engine),
for the tests and benchmarks that drive the engine directly, without a scheduler or a process."""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any

from shared.config import Settings, default_settings, replace
from shared.derive import profile_for
from shared.model_files import resolve_model
from shared.profiles import Profile
from worker import warmup
from worker.engine import Engine
from worker.job import Job
from worker.process import build_engine


def model_of(settings: Settings, profile_name: str = "") -> tuple[Profile, Path]:
    """A profile (`profile_name`, else the one settings name) and its GGUF, found as a worker finds it."""
    return _model(profile_name or settings.profile, settings.cache_path, settings.model, settings.default_profile)


@lru_cache(maxsize=8)
def _model(profile_name: str, cache_path: Path, override: str, default: str) -> tuple[Profile, Path]:
    """Cached: resolving a packaged model checks the assembled file's SHA-256."""
    profile = profile_for(profile_name, override, cache_dir=cache_path, default=default)
    return profile, resolve_model(profile, cache_path, override)


def default_model() -> tuple[Profile, Path]:
    return model_of(default_settings())


def new_engine(settings: Settings | None = None, *, pin_preamble: bool = True,
               state_cache_tokens: int | None = None, **changes: Any) -> Engine:
    """An engine on the settings' model (default: default_settings()) with `changes` to them
    (ctx=, state_cache=, mode=, ...), built and pinned as a worker does, on as many threads as one
    worker of the default fleet; state_cache_tokens: the snapshots' cells in tokens, exactly,
    instead of the state_cache_mb setting's worth."""
    settings = replace(settings or default_settings(), **changes)
    profile, path = model_of(settings)
    return build_engine(settings, profile, path, settings.threads or settings.cores_per_worker,
                        pin_preamble=pin_preamble, snapshot_tokens=state_cache_tokens)


def make_job(engine: Engine, state: str, questions: list[str]) -> Job:
    """A request of the default profile, tokenized as the gateway does."""
    return warmup.make_job(engine, default_model()[0], state, questions)
