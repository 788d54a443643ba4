"""The scheduler's batching policy and thread, against a recording stand-in for the engine."""
from __future__ import annotations

import threading
import time
from collections import deque

from shared.messages import Error, ErrorCode, Result, Score
from worker.job import Job
from worker.scheduler import Pending, Scheduler, take_batch

MAX_REQUESTS = 31  # as many as the real engine reads at once (Engine.max_batch_requests)


def pending(rid: str, tokens: int, deadline: float | None = None) -> Pending:
    """A queued request of `tokens` tokens in all (a prefix and one one-token suffix)."""
    return Pending.from_score(Score(request_id=rid, prefix=[1] * (tokens - 1), suffixes=[[2]], yes_ids=[4],
                                    no_ids=[5], deadline=deadline if deadline is not None else time.time() + 60))


def test_a_pending_request_is_its_score_with_the_engine_job_made_from_it():
    item = pending("r", 10, deadline=123.0)
    assert (item.request_id, item.deadline, item.tokens) == ("r", 123.0, 10)
    assert (item.job.prefix, item.job.suffixes, item.job.yes_ids, item.job.no_ids) == ([1] * 9, [[2]], [4], [5])


def ids(batch: list[Pending]) -> list[str]:
    return [p.request_id for p in batch]


def test_takes_requests_in_arrival_order_while_they_fit():
    q = deque([pending("a", 100), pending("b", 100), pending("c", 100), pending("d", 100)])
    assert ids(take_batch(q, 384)) == ["a", "b", "c"]
    assert ids(q) == ["d"]


def test_first_request_always_goes_even_if_larger_than_budget():
    q = deque([pending("big", 1000), pending("small", 10)])
    assert ids(take_batch(q, 384)) == ["big"]
    assert ids(q) == ["small"]


def test_stops_at_first_request_that_does_not_fit_without_skipping():
    q = deque([pending("a", 300), pending("b", 200), pending("c", 10)])
    assert ids(take_batch(q, 384)) == ["a"]  # "c" would fit, but is not taken past "b"
    assert ids(q) == ["b", "c"]


def test_exact_fit_is_taken():
    q = deque([pending("a", 184), pending("b", 200)])
    assert ids(take_batch(q, 384)) == ["a", "b"]


class RecordingEngine:
    """Stands in for worker.engine.Engine: records batches, answers a margin per suffix."""

    def __init__(self, gate: threading.Event | None = None) -> None:
        self.batches: list[int] = []
        self.gate = gate
        self.started = threading.Event()

    def run(self, jobs: list[Job]) -> int:
        self.started.set()
        if self.gate is not None:
            self.gate.wait(10)
        self.batches.append(len(jobs))
        for job in jobs:
            job.margins = [0.5] * len(job.suffixes)
        return sum(len(j.prefix) for j in jobs)

    def new_tokens(self, job: Job, earlier: list[Job]) -> int:
        return len(job.prefix) + sum(map(len, job.suffixes))


class Collector(list):
    """What the scheduler emitted; wait(n) blocks on a condition until n messages arrived."""

    def __init__(self) -> None:
        super().__init__()
        self.cond = threading.Condition()

    def __call__(self, msg) -> None:
        with self.cond:
            self.append(msg)
            self.cond.notify_all()

    def wait(self, n: int, timeout: float = 5.0) -> None:
        with self.cond:
            assert self.cond.wait_for(lambda: len(self) >= n, timeout), f"only {len(self)} of {n} messages"


def run_scheduler(sched: Scheduler) -> tuple[threading.Thread, Collector]:
    out = Collector()
    t = threading.Thread(target=sched.run, args=(out,), daemon=True)
    t.start()
    return t, out


def test_queued_requests_are_batched_and_answered_in_order():
    gate = threading.Event()
    engine = RecordingEngine(gate)
    sched = Scheduler(engine, budget=384, max_requests=MAX_REQUESTS)
    thread, out = run_scheduler(sched)
    sched.submit(pending("first", 50))
    assert engine.started.wait(5)  # "first" runs alone while the others queue behind it
    for rid in ("a", "b", "c"):
        sched.submit(pending(rid, 100))
    assert sched.figures()[1:] == (300, 4)
    gate.set()
    out.wait(4)
    assert [m.request_id for m in out] == ["first", "a", "b", "c"]
    assert engine.batches == [1, 3]
    assert sched.figures()[0].batched_requests == 3
    assert all(isinstance(m, Result) and m.margins == [0.5] for m in out)
    sched.stop()
    thread.join(5)
    assert not thread.is_alive()


def test_cancel_removes_a_queued_request_and_stop_hands_back_the_rest():
    gate = threading.Event()
    engine = RecordingEngine(gate)
    sched = Scheduler(engine, budget=100, max_requests=MAX_REQUESTS)
    thread, out = run_scheduler(sched)
    sched.submit(pending("running", 50))
    assert engine.started.wait(5)
    sched.submit(pending("x", 50))
    sched.submit(pending("y", 50))
    assert sched.cancel("x") is True
    assert sched.cancel("running") is False  # already in the engine
    assert sched.stop() == ["y"]
    gate.set()
    thread.join(5)
    assert [m.request_id for m in out] == ["running"]  # the running batch still finishes


def test_expired_requests_are_answered_with_an_error_not_run():
    engine = RecordingEngine()
    sched = Scheduler(engine, budget=384, max_requests=MAX_REQUESTS)
    sched.submit(pending("late", 10, deadline=time.time() - 1))
    sched.submit(pending("ok", 10))
    thread, out = run_scheduler(sched)
    out.wait(2)
    sched.stop()
    thread.join(5)
    kinds = {m.request_id: type(m) for m in out}
    assert kinds == {"late": Error, "ok": Result}
    assert engine.batches == [1]


def test_engine_failure_answers_the_batch_with_errors_and_keeps_serving():
    class Flaky(RecordingEngine):
        def run(self, jobs):
            if not self.batches:
                self.batches.append(-1)
                raise RuntimeError("boom")
            return super().run(jobs)

    sched = Scheduler(Flaky(), budget=10, max_requests=MAX_REQUESTS)
    thread, out = run_scheduler(sched)
    sched.submit(pending("a", 10))
    out.wait(1)
    sched.submit(pending("b", 10))
    out.wait(2)
    sched.stop()
    thread.join(5)
    assert isinstance(out[0], Error) and out[0].code is ErrorCode.ENGINE
    assert isinstance(out[1], Result)


def test_more_tiny_requests_than_sequences_are_split_over_batches():
    engine = RecordingEngine()
    sched = Scheduler(engine, budget=1000, max_requests=4)
    for i in range(10):
        sched.submit(pending(str(i), 5))
    thread, out = run_scheduler(sched)
    out.wait(10)
    sched.stop()
    thread.join(5)
    assert engine.batches == [4, 4, 2]
    assert [m.request_id for m in out] == [str(i) for i in range(10)]


def test_clear_drops_every_queued_request_and_counts_them_cancelled():
    class Idle:
        def new_tokens(self, job, earlier):
            return 1

    scheduler = Scheduler(Idle(), budget=384, max_requests=MAX_REQUESTS)
    for rid in ("a", "b"):
        scheduler.submit(pending(rid, 2))
    assert scheduler.clear() == ["a", "b"]
    counters, tokens, requests = scheduler.figures()
    assert (tokens, requests) == (0, 0) and counters.cancelled == 2
