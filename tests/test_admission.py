"""gateway/admission.py with the real Fleet over ZeroMQ: a worker that does not serve the gateway's
model is refused at registration, gets no work, and /health lists it (and a worker that could not
start, with its reason); a newcomer claiming a live
worker's id is refused and told so, and cannot displace it; and a real fleet refuses a worker started in another mode."""
from __future__ import annotations

import asyncio
import subprocess
import sys

import pytest
import zmq.asyncio

from gateway.admission import Admission
from jevfleet.harness.fleet import health
from jevfleet.harness.load import by_id, decision, post, served_by, states
from jevfleet.harness.processes import wait_until
from jevfleet.harness.scripted_worker import ScriptedWorker
from shared.config import PROJECT_ROOT
from shared.messages import CannotStart, Ready, Refuse
from shared.refusal import REFUSED, refusal_in
from tests.inprocess import InProcessGateway
from tests.test_fleet import run, running, score, settings, until


GATEWAY = {"model_sha256": "a" * 64, "profile": "p:1", "mode": "deterministic", "tokens": "k"}
FAST = {**GATEWAY, "mode": "fast"}


def ready(worker_id: str, pid: int, serves: dict) -> Ready:
    return Ready(worker_id=worker_id, pid=pid, cores=[0], serves=serves)


def test_a_refusal_is_listed_with_its_reason_and_forgotten_once_admitted():
    admission = Admission(GATEWAY)
    assert admission.admits(ready("w", 1, GATEWAY))
    assert not admission.admits(ready("x", 2, FAST))
    assert admission.describe(forget_after_s=60) == [
        {"id": "x", "pid": 2, "state": "refused", "reason": "mode is 'fast', the gateway's is 'deterministic'"}]
    assert admission.admits(ready("x", 3, GATEWAY))  # restarted with the right settings
    assert admission.describe(forget_after_s=60) == []


def test_a_worker_that_could_not_start_is_listed_as_failed_until_one_of_its_id_is_admitted():
    admission = Admission(GATEWAY)
    admission.cannot_start(CannotStart(worker_id="x", pid=2, reason="start-up canary: moved"))
    failed = [{"id": "x", "pid": 2, "state": "failed", "reason": "start-up canary: moved"}]
    assert admission.describe(forget_after_s=0) == failed  # it never beats again: silence does not forget it
    assert admission.admits(ready("x", 3, GATEWAY))  # restarted, and it serves
    assert admission.describe(forget_after_s=60) == []


def test_health_lists_an_ignored_worker_and_one_that_could_not_start_with_their_reasons(tmp_path):
    """The in-process gateway (its scripted worker serving what the gateway does) and two more over
    real ZeroMQ: one serving another mode, one that could not start."""
    gw = InProcessGateway(tmp_path)
    try:
        gw.fleet.admission.expected = gw.worker.serves = GATEWAY

        async def others() -> list[ScriptedWorker]:
            wrong = await ScriptedWorker(gw.zctx, gw.settings.zmq_endpoint, "wrong", pid=7, serves=FAST).start()
            failed = ScriptedWorker(gw.zctx, gw.settings.zmq_endpoint, "failed", pid=8)
            await failed.send(CannotStart(worker_id="failed", pid=8, reason="llama.cpp could not load /m.gguf"))
            return [wrong, failed]

        workers = gw._run(others())
        try:
            body = wait_until(lambda: health(gw.url)[1], "both listed",
                              done=lambda h: len(h.get("refused_workers", [])) == 2, timeout=10)
            assert sorted(body["refused_workers"], key=lambda r: r["id"]) == [
                {"id": "failed", "pid": 8, "state": "failed", "reason": "llama.cpp could not load /m.gguf"},
                {"id": "wrong", "pid": 7, "state": "refused", "reason": "mode is 'fast', the gateway's is "
                                                                        "'deterministic'"}]
            assert [w["id"] for w in body["workers"]] == ["inprocess/w0"] and body["status"] == "ready"
        finally:
            for w in workers:
                w.close()
    finally:
        gw.stop()


def test_a_refused_worker_is_logged_once_per_process(caplog):
    admission = Admission(GATEWAY)
    for pid in (2, 2, 2, 3):
        admission.admits(ready("x", pid, FAST))
    assert [r.getMessage().split(":")[0] for r in caplog.records] == ["refused worker x (pid 2)",
                                                                      "refused worker x (pid 3)"]


def test_a_worker_of_another_mode_never_joins_and_gets_no_request(tmp_path):
    async def scenario():
        async with running(settings(tmp_path)) as (fleet, worker):
            fleet.membership.admission = Admission(GATEWAY)
            good = await worker("good", serves=GATEWAY)
            ctx = zmq.asyncio.Context()
            wrong = await ScriptedWorker(ctx, fleet.endpoint, "wrong", pid=7, serves=FAST).start()
            try:
                await until(lambda: [r["id"] for r in fleet.admission.describe(60)] == ["wrong"], "refused")
                assert "wrong" not in fleet.workers
                submitted = [asyncio.create_task(fleet.submit(score(f"r{i}"))) for i in range(4)]
                for _ in range(4):
                    await good.answer(await good.recv())
                await asyncio.gather(*submitted)
                assert fleet.queues["good"].served == 4
                assert await wrong.nothing_for(0.2)
            finally:
                wrong.close()
                ctx.term()

    run(scenario())


@pytest.mark.parametrize("serves", [FAST, GATEWAY], ids=["refused", "admissible"])
def test_a_newcomer_claiming_a_live_workers_id_is_told_it_is_refused_and_cannot_displace_it(tmp_path, serves):
    """Each process has its own routing identity, so the newcomer is heard: it gets Refuse naming
    the holder's pid, /health lists it as a duplicate, and the live worker keeps serving. (Once the
    ROUTER handed the id over and the live worker was taken down; then the newcomer went unheard.)"""
    async def scenario():
        async with running(settings(tmp_path)) as (fleet, worker):
            fleet.membership.admission = Admission(GATEWAY)
            live = await worker("a", pid=100, serves=GATEWAY)
            ctx = zmq.asyncio.Context()
            newcomer = await ScriptedWorker(ctx, fleet.endpoint, "a", pid=200, serves=serves).start()
            try:
                refusal = await newcomer.recv()
                assert isinstance(refusal, Refuse) and "held by a live worker (pid 100)" in refusal.reason
                (listed,) = fleet.admission.describe(60)
                assert (listed["id"], listed["pid"], listed["state"]) == ("a", 200, "duplicate")
                assert listed["reason"] == refusal.reason
                assert (fleet.workers["a"].pid, fleet.workers["a"].state) == (100, "up")
                task = asyncio.create_task(fleet.submit(score("r1")))
                await live.answer(await live.recv(), margin=3.0)
                assert (await task).margins == [3.0]
                assert fleet.admission.describe(60) == [listed]  # the holder's beats do not clear it
            finally:
                newcomer.close()
                ctx.term()

    run(scenario())


@pytest.mark.fleet
def test_a_fast_mode_worker_joining_a_deterministic_fleet_is_refused_and_serves_nothing(fleet):
    cmd = [sys.executable, "-m", "jevfleet", "worker", "--id", "fast-one", "--index", "1", "--mode", "fast",
           "--run-dir", str(fleet.run_dir), "--port", str(fleet.port), "--cores-per-worker", "1"]
    log_path = fleet.run_dir / "fast_worker.log"
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, cwd=PROJECT_ROOT, stdout=log, stderr=subprocess.STDOUT)
    try:
        health = fleet.wait_for(lambda h: any(r["id"] == "fast-one" for r in h.get("refused_workers", [])),
                                "fast worker refused", timeout=180)
        (refused,) = [r for r in health["refused_workers"] if r["id"] == "fast-one"]
        assert refused["pid"] == proc.pid and "mode is 'fast'" in refused["reason"]
        assert "fast-one" not in by_id(health) and health["status"] == "ready"
        before = served_by(fleet)
        assert [post(fleet.url, decision(s)).status for s in states(6, tag="refused ")] == [200] * 6
        after = served_by(fleet)
        assert "fast-one" not in after and sum(after.values()) - sum(before.values()) == 6
        assert "refused worker fast-one" in (fleet.run_dir / "gateway.log").read_text()
    finally:
        proc.terminate()
        proc.wait(timeout=60)


@pytest.mark.fleet
def test_a_real_worker_started_with_a_live_workers_id_exits_2_with_its_line_and_is_listed(fleet):
    """The same command line twice (a wrong --index): the second process loads, says READY, is
    told Refuse, and exits 2 with the reason as its last line; the live worker keeps serving."""
    (live,) = fleet.wait_for(lambda h: h["status"] == "ready", "ready")["workers"]
    cmd = [sys.executable, "-m", "jevfleet", "worker", "--id", live["id"], "--index", "1", "--run-dir",
           str(fleet.run_dir), "--port", str(fleet.port), "--cores-per-worker", "2", "--pin-workers", "0"]
    proc = subprocess.Popen(cmd, cwd=PROJECT_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        out, _ = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
    reason = (f"worker id {live['id']} is held by a live worker (pid {live['pid']}); start this one with another "
              "--id (or --index)")
    assert proc.returncode == REFUSED and refusal_in(out) == reason, out[-2000:]
    _, body = fleet.health()
    assert {"id": live["id"], "pid": proc.pid, "state": "duplicate", "reason": reason} in body["refused_workers"]
    assert by_id(body)[live["id"]]["pid"] == live["pid"] and by_id(body)[live["id"]]["state"] == "up"
    assert post(fleet.url, decision(states(1, tag="duplicate ")[0])).status == 200
