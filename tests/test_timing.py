"""gateway/timing.py: the Server-Timing header, and the wait for a worker split into the worker's
own queue and inference times and the rest, `outside`."""
from __future__ import annotations

import pytest

from gateway import timing as timing_module
from gateway.timing import Timing


@pytest.fixture
def clock(monkeypatch):
    """perf_counter under the test's control, in seconds."""
    now = [100.0]
    monkeypatch.setattr(timing_module.time, "perf_counter", lambda: now[0])
    return now


def entries(header: str) -> dict[str, float]:
    return {name: float(ms) for name, ms in (part.split(";dur=") for part in header.split(", "))}


def test_the_wait_outside_the_worker_is_what_its_own_times_do_not_cover(clock):
    t = Timing()
    clock[0] += 0.002
    t.lap("parse")
    clock[0] += 0.250  # sent, parked, resent, answered: 250 ms of waiting
    t.answered(queue_ms=40.0, run_ms=150.0)
    clock[0] += 0.001
    t.lap("respond")
    got = entries(t.header())
    assert list(got) == ["parse", "queue", "inference", "outside", "respond", "total"]
    assert got["queue"] == 40.0 and got["inference"] == 150.0
    assert got["outside"] == pytest.approx(60.0, abs=0.01)
    assert got["total"] == pytest.approx(253.0, abs=0.01)


def test_outside_is_never_negative(clock):
    t = Timing()
    clock[0] += 0.010
    t.answered(queue_ms=6.0, run_ms=4.02)  # the worker's clock saw a hair more than ours
    assert t.ms["outside"] == 0.0
