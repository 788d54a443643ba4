"""The gateway's Fleet over real ZeroMQ against scripted workers: membership, loss and resend,
drain hand-back, deadlines, cancellation, backpressure, and the request lifecycle (queued, parked,
done). No model is loaded (fast)."""
from __future__ import annotations

import asyncio
import time
from contextlib import asynccontextmanager

import pytest
import zmq.asyncio

from gateway.fleet import Fleet, Unavailable
from gateway.queues import WorkerQueue
from jevfleet.harness.scripted_worker import ScriptedWorker
from shared.config import Settings, default_settings
from shared.messages import Cancel, Drain, Error, Score, encode, prefix_key

PREFIX = [2, 10, 11, 12]


def settings(tmp_path, **changes) -> Settings:
    base = dict(endpoint=f"ipc://{tmp_path}/fleet.ipc", heartbeat_s=0.05, dead_after_s=0.3, check_lifecycle=1)
    return default_settings(**{**base, **changes})


def score(rid: str, prefix: list[int] = PREFIX, deadline_s: float = 10.0) -> Score:
    return Score(request_id=rid, prefix=prefix, suffixes=[[5, 6]], yes_ids=[8], no_ids=[9],
                 deadline=time.time() + deadline_s)


async def until(predicate, what: str, timeout: float = 3.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"not {what} after {timeout}s")
        await asyncio.sleep(0.01)


@asynccontextmanager
async def running(s: Settings, preamble_tokens: int = 0, *, breaks_lifecycle: bool = False):
    """A started Fleet and a factory of fake workers connected to it; all closed afterwards. With
    check_lifecycle on (settings() sets it) the request lifecycle was checked at every event and
    never found broken, unless the test breaks it on purpose."""
    fleet = Fleet(s, preamble_tokens=preamble_tokens)
    await fleet.start()
    ctx = zmq.asyncio.Context()
    made: list[ScriptedWorker] = []

    async def worker(worker_id: str, **kw) -> ScriptedWorker:
        w = ScriptedWorker(ctx, s.zmq_endpoint, worker_id, **kw)
        made.append(w)
        await w.start()
        await until(lambda: worker_id in fleet.workers and fleet.workers[worker_id].pid == w.pid
                    and fleet.workers[worker_id].up, f"{worker_id} up")
        return w

    try:
        yield fleet, worker
        if s.check_lifecycle and not breaks_lifecycle:
            assert fleet.counters["lifecycle_breaches"] == 0, "the log says what broke"
    finally:
        for w in made:
            w.close()
        ctx.term()
        await fleet.stop()


def run(coro):
    return asyncio.run(coro)


def test_a_request_reaches_a_worker_and_its_result_comes_back(tmp_path):
    async def go():
        async with running(settings(tmp_path)) as (fleet, worker):
            a = await worker("a")
            task = asyncio.create_task(fleet.submit(score("r1")))
            msg = await a.recv()
            assert (msg.request_id, msg.prefix) == ("r1", PREFIX)
            assert fleet.placement.lifecycle() == {"queued": 1}
            await a.answer(msg, margin=0.5, read=1000, run_ms=500)
            assert (await task).margins == [0.5]
            assert fleet.placement.lifecycle() == {}  # done, and forgotten once its waiting ended
            w = fleet.queues["a"]
            assert (w.served, w.queued_requests) == (1, 0)
            assert w.tokens_per_s > 200  # moved toward the measured 2000 tokens/s
    run(go())


def test_the_queue_bound_counts_what_the_worker_will_read(tmp_path):
    """Not the preamble every worker keeps, and not the state a worker was just sent."""
    async def go():
        async with running(settings(tmp_path), preamble_tokens=3) as (fleet, worker):
            a = await worker("a")
            tasks = [asyncio.create_task(fleet.submit(score(rid))) for rid in ("r1", "r2")]
            for _ in tasks:
                await a.recv()
            # r1: 1 state token after the 3-token preamble + 2 question tokens; r2: its questions only
            assert (fleet.queues["a"].queued_reads, fleet.queues["a"].queued_tokens) == (3 + 2, 6 + 6)
            for task in tasks:
                task.cancel()
    run(go())


def test_a_dropped_connection_resends_its_requests_to_another_worker(tmp_path):
    async def go():
        # dead_after_s is long: only the disconnect (monitor + ping) can find the loss in time
        async with running(settings(tmp_path, dead_after_s=30)) as (fleet, worker):
            a, b = await worker("a"), await worker("b")
            task = asyncio.create_task(fleet.submit(score("r1")))
            first = await a.recv()
            a.close()
            again = await b.recv()
            assert again == first
            await b.answer(again, margin=-1.0)
            assert (await task).margins == [-1.0]
            assert fleet.workers["a"].state == "down" and fleet.counters["resent"] == 1
    run(go())


def test_a_silent_worker_is_taken_out_and_its_requests_resent(tmp_path):
    async def go():
        async with running(settings(tmp_path)) as (fleet, worker):
            a, b = await worker("a"), await worker("b")
            task = asyncio.create_task(fleet.submit(score("r1")))
            await a.recv()
            a.stop_beating()  # connected but silent, e.g. stopped or wedged
            await b.answer(await b.recv())
            await task
            assert fleet.workers["a"].state == "down"
    run(go())


def test_silence_alone_does_not_use_up_the_one_resend(tmp_path):
    async def go():
        async with running(settings(tmp_path)) as (fleet, worker):
            a, b = await worker("a"), await worker("b")
            task = asyncio.create_task(fleet.submit(score("r1")))
            await a.recv()
            a.stop_beating()  # a is only slow: its request goes to b, which then dies
            await b.recv()
            b.close()
            await until(lambda: fleet.describe()["parked"] == 1, "parked")
            await a.start()  # a was alive all along: back in service, it gets the request again
            await a.answer(await a.recv(), margin=3.0)
            assert (await task).margins == [3.0]
    run(go())


def test_a_request_is_resent_once_then_answered_503(tmp_path):
    async def go():
        async with running(settings(tmp_path)) as (fleet, worker):
            a, b = await worker("a"), await worker("b")
            task = asyncio.create_task(fleet.submit(score("r1")))
            await a.recv()
            a.close()
            await b.recv()
            b.close()
            with pytest.raises(Unavailable) as err:
                await task
            assert err.value.status == 503 and err.value.retry_after >= 1
    run(go())


def test_with_no_other_worker_a_lost_request_waits_for_the_restart(tmp_path):
    async def go():
        async with running(settings(tmp_path)) as (fleet, worker):
            a = await worker("a", pid=100)
            task = asyncio.create_task(fleet.submit(score("r1")))
            await a.recv()
            a.close()
            await until(lambda: fleet.describe()["parked"] == 1, "parked")
            assert fleet.placement.lifecycle() == {"parked": 1}  # not also still queued at the lost worker
            a2 = await worker("a", pid=101)  # supervisord's restart: same id, new pid
            await a2.answer(await a2.recv(), margin=2.0)
            assert (await task).margins == [2.0]
    run(go())


def test_a_late_answer_from_a_silent_worker_is_taken_while_its_request_is_parked(tmp_path):
    async def go():
        async with running(settings(tmp_path)) as (fleet, worker):
            a = await worker("a")
            task = asyncio.create_task(fleet.submit(score("r1")))
            first = await a.recv()
            a.stop_beating()  # taken out for silence; no other worker: the request waits, parked
            await until(lambda: fleet.describe()["parked"] == 1, "parked")
            await a.answer(first, margin=0.75)  # it was only slow: its answer is the first one
            assert (await task).margins == [0.75]
            assert fleet.placement.lifecycle() == {} and fleet.describe()["parked"] == 0
    run(go())


def test_a_draining_worker_hands_its_queue_back_and_gets_no_new_work(tmp_path):
    async def go():
        async with running(settings(tmp_path)) as (fleet, worker):
            a, b = await worker("a"), await worker("b")
            tasks = [asyncio.create_task(fleet.submit(score(rid))) for rid in ("r1", "r2")]
            got = [await a.recv(), await a.recv()]  # same state: affinity keeps both on a
            await a.send(Drain(worker_id="a", request_ids=[m.request_id for m in got]))
            for _ in got:
                await b.answer(await b.recv())
            await asyncio.gather(*tasks)
            assert fleet.workers["a"].state == "draining" and fleet.counters["handed_back"] == 2
            late = asyncio.create_task(fleet.submit(score("r3")))
            await b.answer(await b.recv())
            await late
    run(go())


def test_a_request_refused_by_a_draining_worker_is_placed_again(tmp_path):
    async def go():
        async with running(settings(tmp_path)) as (fleet, worker):
            a, b = await worker("a"), await worker("b")
            task = asyncio.create_task(fleet.submit(score("r1")))
            first = await a.recv()
            await a.send(Error(request_id=first.request_id, code="draining", message="stopping"))
            # not answered with a's refusal, and not sent back to a (which holds its prefix)
            await until(lambda: task.done() or fleet.queues["b"].queued_requests == 1, "placed again or answered")
            assert not task.done(), task.exception()
            assert fleet.queues["a"].queued_requests == 0
            again = await b.recv()
            assert again == first
            await b.answer(again, margin=1.5)
            assert (await task).margins == [1.5]
    run(go())


def test_full_queues_answer_429_at_once_with_an_estimated_retry_after(tmp_path):
    async def go():
        async with running(settings(tmp_path, queue_requests=1)) as (fleet, worker):
            a = await worker("a", cores=(0,))
            first = asyncio.create_task(fleet.submit(score("r1", prefix=list(range(998)))))
            await a.recv()
            with pytest.raises(Unavailable) as err:
                await fleet.submit(score("r2"))
            # 998 + 2 queued tokens at the default 200 tokens/s of one core
            assert (err.value.status, err.value.retry_after) == (429, 5)
            early = fleet.refusal_when_full()  # what the door answers before reading a body
            assert (early.status, early.retry_after) == (429, 5)
            assert fleet.counters["refused"] == 2
            first.cancel()
    run(go())


def test_no_worker_at_all_is_503(tmp_path):
    async def go():
        async with running(settings(tmp_path)) as (fleet, _):
            assert fleet.refusal_when_full() is None  # the request path answers (422 or 503)
            with pytest.raises(Unavailable) as err:
                await fleet.submit(score("r1"))
            assert err.value.status == 503 and err.value.retry_after >= 1
    run(go())


def test_past_its_deadline_a_queued_request_is_withdrawn_and_answered_503(tmp_path):
    async def go():
        async with running(settings(tmp_path)) as (fleet, worker):
            a = await worker("a")
            task = asyncio.create_task(fleet.submit(score("r1", deadline_s=0.3)))
            await a.recv()
            assert await a.recv() == Cancel(request_id="r1")  # at the deadline
            await a.send(Error(request_id="r1", code="cancelled", message="dropped before it ran"))
            with pytest.raises(Unavailable) as err:
                await task
            assert err.value.status == 503 and err.value.retry_after >= 1
            assert fleet.queues["a"].queued_requests == 0
    run(go())


def test_a_request_already_running_at_its_deadline_is_allowed_to_finish(tmp_path):
    async def go():
        async with running(settings(tmp_path)) as (fleet, worker):
            a = await worker("a")
            task = asyncio.create_task(fleet.submit(score("r1", deadline_s=0.3)))
            first = await a.recv()
            assert await a.recv() == Cancel(request_id="r1")  # too late: it is being read
            await a.answer(first, margin=4.0)
            assert (await task).margins == [4.0]
    run(go())


def test_a_parked_request_is_answered_503_at_its_deadline(tmp_path):
    async def go():
        async with running(settings(tmp_path)) as (fleet, worker):
            a = await worker("a")
            task = asyncio.create_task(fleet.submit(score("r1", deadline_s=0.5)))
            await a.recv()
            a.close()  # no other worker, none comes back
            with pytest.raises(Unavailable) as err:
                await task
            assert err.value.status == 503 and fleet.describe()["parked"] == 0
    run(go())


def test_a_worker_reporting_expiry_gives_503(tmp_path):
    async def go():
        async with running(settings(tmp_path)) as (fleet, worker):
            a = await worker("a")
            task = asyncio.create_task(fleet.submit(score("r1")))
            await a.send(Error(request_id=(await a.recv()).request_id, code="expired", message="late"))
            with pytest.raises(Unavailable) as err:
                await task
            assert err.value.status == 503
    run(go())


def test_a_client_that_leaves_has_its_queued_work_cancelled(tmp_path):
    async def go():
        async with running(settings(tmp_path)) as (fleet, worker):
            a = await worker("a")
            task = asyncio.create_task(fleet.submit(score("r1")))
            await a.recv()
            task.cancel()  # what aiohttp does to the handler when the client disconnects
            assert await a.recv() == Cancel(request_id="r1")
            assert fleet.describe()["inflight"] == 0 and fleet.counters["cancelled"] == 1
    run(go())


def test_a_restart_replaces_the_old_incarnation_whose_late_beats_are_ignored(tmp_path):
    async def go():
        async with running(settings(tmp_path)) as (fleet, worker):
            old = await worker("a", pid=100)
            old.close()
            # a restart connects once the old connection is gone (a worker loads its model first);
            # one connecting while it is still held would be ignored (gateway/link.py)
            await until(lambda: fleet.workers["a"].state == "down", "the old incarnation down")
            await worker("a", pid=101)
            ghost = await worker("b", pid=7)
            ghost.worker_id = "a"
            ghost.pid = 100
            await ghost.send(ghost.status())  # a beat of the replaced incarnation, arriving late
            ghost.worker_id, ghost.pid = "b", 7
            sent = time.monotonic()
            await ghost.send(ghost.status())  # one socket keeps order: once this is seen, so was that
            await until(lambda: fleet.workers["b"].last_seen > sent, "the ghost's beats handled")
            assert fleet.workers["a"].pid == 101
    run(go())


def test_advertised_snapshots_attract_requests_with_that_state(tmp_path):
    async def go():
        async with running(settings(tmp_path)) as (fleet, worker):
            a, b = await worker("a"), await worker("b")
            b.snapshot_keys = [prefix_key(PREFIX)]
            await until(lambda: fleet.workers["b"].status.snapshot_keys, "b's snapshots known")
            task = asyncio.create_task(fleet.submit(score("r1")))
            await b.answer(await b.recv())  # a would win the tie between idle workers
            await task
            assert await a.nothing_for(0.1)
    run(go())


def test_a_bad_frame_or_a_message_only_the_gateway_sends_is_dropped_and_the_link_lives_on(tmp_path, caplog):
    async def go():
        async with running(settings(tmp_path)) as (fleet, worker):
            a = await worker("a")
            await a.sock.send(encode(score("from a worker?")))  # a message the gateway sends, not takes
            await a.sock.send(b"\x81\xa4kind\xa5score")  # a Score without its fields
            task = asyncio.create_task(fleet.submit(score("r1")))
            await a.answer(await a.recv(), margin=0.25)
            assert (await task).margins == [0.25]
            assert fleet.queues["a"].served == 1 and "from a worker?" not in fleet.inflight_ids
    run(go())
    assert "ignored a Score" in caplog.text and "dropped a bad frame" in caplog.text


def test_the_lifecycle_check_catches_a_request_left_in_a_lost_workers_queue(tmp_path, monkeypatch, caplog):
    """As if taking back a lost worker's queue forgot to empty it: the request is then queued at
    the lost worker and at the one it was resent to. The check (on in every test here) says so."""
    monkeypatch.setattr(WorkerQueue, "take_all", lambda self: list(self.requests.values()))

    async def go():
        async with running(settings(tmp_path), breaks_lifecycle=True) as (fleet, worker):
            a, b = await worker("a"), await worker("b")
            task = asyncio.create_task(fleet.submit(score("r1")))
            await a.recv()
            a.close()
            await b.answer(await b.recv())
            await task
            assert fleet.counters["lifecycle_breaches"] >= 1
            with pytest.raises(RuntimeError, match="worker a is down and holds 1 requests"):
                fleet.placement.lifecycle()
    run(go())
    assert "request lifecycle broken: worker a is down and holds 1 requests" in caplog.text
