"""Warmup: the startup pass runs the engine as requests will and leaves nothing behind."""
from __future__ import annotations

import pytest

from jevfleet.harness.engine import default_model, new_engine
from worker.engine import Engine
from worker.warmup import startup_warmup


@pytest.fixture(scope="module")
def engine() -> Engine:
    engine = new_engine(ctx=1024, state_cache=2, state_cache_tokens=1024)  # as a worker warms up
    yield engine
    engine.close()


@pytest.mark.model
def test_startup_warmup_keeps_no_snapshot_and_counts_nothing(engine):
    profile, _ = default_model()
    before, calls = engine.cache.stats(), engine.decode_calls
    startup_warmup(engine, profile)
    assert engine.cache.stats() == before and len(engine.cache.entries) == 1  # the preamble
    assert engine.decode_calls >= calls + 2  # both warm batches were read
