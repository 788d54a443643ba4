"""Warmup: the startup pass leaves nothing behind, idle warmup walks the decode shapes not yet
seen and gives way to real work at once."""
from __future__ import annotations

import threading

import pytest

from jevfleet.harness.engine import default_model, make_job, new_engine
from shared.messages import Result, Score
from tests.test_scheduler import Collector
from worker.engine import Engine
from worker.pieces import piece_sizes
from worker.scheduler import Pending, Scheduler
from worker.warmup import IdleWarmup, startup_warmup


class ShapeEngine:
    """Records warm calls; the first call for a shape is aborted once when `abort_first`."""

    def __init__(self, abort_first: bool = False) -> None:
        self.seen_shapes: set[int] = set()
        self.calls: list[int] = []
        self.abort_first = abort_first

    def decode_shapes(self, n: int) -> list[int]:
        return piece_sizes(max(1, n), 60)

    def warm_call(self, rows: int, stop) -> bool:
        self.calls.append(rows)
        if self.abort_first and self.calls.count(rows) == 1:
            return False
        self.seen_shapes.add(rows)
        return True


def test_idle_warmup_walks_unseen_shapes_one_call_at_a_time():
    engine = ShapeEngine()
    engine.seen_shapes.update({8, 60})
    idle = IdleWarmup(engine, max_length=384, stop=lambda: False)
    assert idle.shapes == list(range(8, 61, 4))
    results = [idle() for _ in range(12)]
    assert engine.calls == list(range(12, 57, 4))
    assert results[-1] is False and all(results[:-1])
    assert idle() is False and len(engine.calls) == 12  # nothing left: no more calls


def test_an_aborted_warm_call_is_tried_again_later():
    engine = ShapeEngine(abort_first=True)
    idle = IdleWarmup(engine, max_length=10, stop=lambda: False)
    assert [idle(), idle(), idle(), idle()] == [True, True, True, False]
    assert engine.calls == [8, 8, 12, 12] and idle.aborted == 2


@pytest.fixture(scope="module")
def engine() -> Engine:
    engine = new_engine(ctx=1024, state_cache=2, state_cache_tokens=1024)  # as a worker warms up
    yield engine
    engine.close()


@pytest.mark.model
def test_startup_warmup_keeps_no_snapshot_and_counts_nothing(engine):
    profile, _ = default_model()
    before = engine.cache.stats()
    startup_warmup(engine, profile)
    assert engine.cache.stats() == before and len(engine.cache.entries) == 1  # the preamble
    assert 60 in engine.seen_shapes <= set(range(8, 61, 4))  # the deterministic shapes, padded


@pytest.mark.model
def test_a_request_arriving_during_idle_warmup_aborts_it_at_once_and_is_answered(engine):
    """The promise: idle warmup never delays a request by more than the rest of one graph node.
    The first warm call is held at its first abort check until the request is queued, so the
    request surely arrives while a warm call runs; that call must then end at that very check
    (llama_decode aborted), and no other warm call may start before the request is answered."""
    job = make_job(engine, "The train to Porto left twenty minutes late.", ["Was the train late?"])
    engine.run([job])
    reference = job.margins
    engine.seen_shapes.clear()
    sched = Scheduler(engine, budget=384, max_requests=engine.max_batch_requests)
    idle = IdleWarmup(engine, max_length=384, stop=sched.waiting)
    out = Collector()
    warming, queued = threading.Event(), threading.Event()
    checks_after_request: list[bool] = []  # what the held call's abort checks said once the request was queued
    calls: list[tuple[bool, bool]] = []  # per warm call: (started while the request waited, ran to the end)
    real_warm_call = engine.warm_call

    def warm_call(rows, stop):
        held = not warming.is_set()

        def checked_stop() -> bool:
            if held and not warming.is_set():
                warming.set()  # this call is under way: the request may come now
                assert queued.wait(60), "the request was never queued"
            answer = stop()
            if held:
                checks_after_request.append(answer)
            return answer

        started_while_waiting = queued.is_set() and not out
        ran = real_warm_call(rows, checked_stop)
        calls.append((started_while_waiting, ran))
        return ran

    engine.warm_call = warm_call
    thread = threading.Thread(target=sched.run, args=(out, idle, 0.05), daemon=True)
    thread.start()
    try:
        assert warming.wait(60), "idle warmup never started"
        again = make_job(engine, "The train to Porto left twenty minutes late.", ["Was the train late?"])
        sched.submit(Pending.from_score(Score(request_id="r1", prefix=again.prefix, suffixes=again.suffixes,
                                              yes_ids=again.yes_ids, no_ids=again.no_ids, deadline=float("inf"))))
        queued.set()
        out.wait(1, timeout=120)
    finally:
        queued.set()
        sched.stop()
        thread.join(60)
        del engine.warm_call
    assert checks_after_request == [True]  # gave way at the first check after the request came
    assert calls[0] == (False, False) and idle.aborted >= 1  # the held call was aborted, not finished
    assert not any(started for started, _ in calls[1:])  # and none started while the request waited
    assert isinstance(out[0], Result) and out[0].margins == reference
