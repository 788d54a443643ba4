"""Black-box: a real fleet of two single-core workers under supervisord — pinning, prefix
affinity, backpressure, cancellation, and membership changes without a gateway restart."""
from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import aiohttp
import pytest

from jevfleet.harness.fleet import CHECKED, Fleet, start_fleet
from jevfleet.harness.load import by_id, decision, post, program_pid, rss_kb, served_by, states, workers
from jevfleet.harness.processes import paused
from jevfleet.harness.stats import percentile
from shared.config import PROJECT_ROOT

pytestmark = pytest.mark.fleet
QUEUE_REQUESTS = 4


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Fleet:
    f = start_fleet(tmp_path_factory.mktemp("pair"), workers=2,
                    extra=["--cores-per-worker", "1", "--queue-requests", str(QUEUE_REQUESTS),
                           "--deadline-s", "120", *CHECKED])  # slowness on a busy machine is not a 503 here
    yield f
    assert f.stop() == 0, f.logs()
    assert not f.lifecycle_breaches()


def serving_worker(fleet: Fleet, payload: dict) -> str:
    """Send one request on an idle fleet; the worker whose served count went up."""
    before = served_by(fleet)
    assert post(fleet.url, payload).status == 200
    after = served_by(fleet)
    (wid,) = [w for w in after if after[w] != before.get(w, 0)]
    return wid


def test_health_lists_every_worker_pinned_to_its_own_cores(pair):
    ws = list(workers(pair).values())
    assert len(ws) == 2 and all(w["state"] == "up" for w in ws)
    cores = [set(w["cores"]) for w in ws]
    assert cores[0] and cores[1] and not cores[0] & cores[1]
    for w in ws:  # the kernel's view of each worker process agrees
        assert os.sched_getaffinity(w["pid"]) == set(w["cores"])


def test_repeated_states_stick_to_one_worker(pair):
    distinct = states(3, tag="stick ")
    where: dict[int, set[str]] = {}
    for _ in range(2):
        for i, state in enumerate(distinct):
            where.setdefault(i, set()).add(serving_worker(pair, decision(state)))
    assert all(len(ws) == 1 for ws in where.values()), where
    assert len(set.union(*where.values())) == 2  # distinct states still spread over both


def test_affinity_yields_when_the_holder_is_busy(pair):
    payload = decision(states(1, tag="hot ")[0])
    home = serving_worker(pair, payload)
    before = served_by(pair)
    with ThreadPoolExecutor(4) as pool:
        outcomes = list(pool.map(lambda _: post(pair.url, payload), range(4)))
    assert [o.status for o in outcomes] == [200] * 4
    after = served_by(pair)
    gained = {w: after[w] - before[w] for w in after}
    assert gained[home] >= 1 and sum(gained.values()) == 4 and min(gained.values()) >= 1, gained


def test_a_burst_far_above_capacity_gets_200s_and_429s_with_retry_after_and_memory_stays_bounded(pair):
    """2 workers × 4 queued requests of capacity against 160 simultaneous requests; while the
    burst fills every queue, lone probe requests show what a refusal costs. The workers are paused
    while the probes go (SIGSTOP, far shorter than dead_after_s), so the queues stay full however
    fast the machine drains them: unpaused, a fast worker freed a slot by the third probe."""
    gateway = program_pid(pair, "gateway")
    worker_pids = [w["pid"] for w in by_id(pair.health()[1]).values()]
    payloads = [decision(s) for s in states(160, tag="burst ")]

    async def one(session: aiohttp.ClientSession, payload: dict) -> tuple[int, dict, float]:
        started = time.monotonic()
        async with session.post(pair.url + "/v1/systemone", json=payload) as resp:
            await resp.read()
            return resp.status, dict(resp.headers), time.monotonic() - started

    async def burst() -> tuple[list, list]:
        connector = aiohttp.TCPConnector(limit=0)
        async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=120)) as s:
            tasks = [asyncio.create_task(one(s, p)) for p in payloads]
            while not any(t.done() and t.result()[0] == 429 for t in tasks) and not all(t.done() for t in tasks):
                await asyncio.sleep(0.01)
            with paused(worker_pids):
                probes = [await one(s, payloads[0]) for _ in range(5)]  # one at a time, fleet full
            return await asyncio.gather(*tasks), probes  # a reset connection raises: the test fails

    asyncio.run(burst())  # the first burst grows caches and pools to their working size
    rss_before = rss_kb(gateway)
    results, probes = asyncio.run(burst())
    rss_after = rss_kb(gateway)
    statuses = [status for status, _, _ in results]
    assert set(statuses) <= {200, 429, 503}, sorted(set(statuses))
    assert statuses.count(200) >= 2 * QUEUE_REQUESTS and statuses.count(429) >= len(payloads) // 2
    refused = [h for status, h, _ in results + probes if status != 200]
    assert all(int(h["Retry-After"]) >= 1 for h in refused)
    assert [status for status, _, _ in probes] == [429] * 5
    print(f"\nburst: {statuses.count(200)} × 200, {statuses.count(429)} × 429, {statuses.count(503)} × 503; "
          f"429 latency of a lone request on a full fleet: {percentile([t for *_, t in probes], 0.5) * 1000:.1f} ms "
          f"(median of 5), in the burst p50 {percentile([t for st, _, t in results if st == 429], 0.5) * 1000:.0f} ms; "
          f"gateway RSS {rss_before // 1024} → {rss_after // 1024} MB")
    assert rss_after - rss_before < 32 * 1024  # kB: bounded, not growing with the refused load
    idle = pair.wait_for(lambda h: h["fleet"]["inflight"] == 0, "idle again")["fleet"]
    # checked at least at each answered request's submit and answer, and never broken
    assert idle["lifecycle_checks"] >= 2 * statuses.count(200) and idle["lifecycle_breaches"] == 0, idle


def test_a_client_that_disconnects_has_its_queued_work_cancelled(pair):
    blockers = [decision(s) for s in states(4, tag="blocker ", words=140)]
    cancelled_before = sum(w["stats"]["cancelled"] for w in workers(pair).values())
    with ThreadPoolExecutor(4) as pool:
        running = [pool.submit(post, pair.url, p) for p in blockers]
        pair.wait_for(lambda h: h["fleet"]["inflight"] == 4, "busy")
        body = json_bytes(decision(states(1, tag="leaver ")[0]))
        with socket.create_connection(("127.0.0.1", pair.port)) as sock:
            sock.sendall(b"POST /v1/systemone HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                         b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
            pair.wait_for(lambda h: h["fleet"]["inflight"] == 5, "the leaver queued")
        # the socket is closed: the gateway withdraws the request, the worker drops it unrun
        pair.wait_for(lambda h: sum(w["stats"]["cancelled"] for w in h["workers"]) == cancelled_before + 1,
                      "the worker cancelled it")
        assert [f.result().status for f in running] == [200] * 4


def json_bytes(payload: dict) -> bytes:
    return json.dumps(payload).encode()


def test_stopping_a_worker_drains_it_and_starting_it_brings_it_back(pair):
    """supervisorctl stop = SIGTERM: the worker hands its queue back and exits 0; the gateway
    serves on with the other; supervisorctl start and it serves again, no gateway restart."""
    ids = sorted(workers(pair))
    victim = ids[1]
    program = "worker:worker_01"
    old_pid = workers(pair)[victim]["pid"]
    handed_back = pair.health()[1]["fleet"]["handed_back"]
    # each request is longer than a batch's token budget, so the victim runs one at a time and
    # still holds a queue when SIGTERM lands however fast it reads
    payloads = [decision(s) for s in states(8, tag="drain ", words=700)]
    with ThreadPoolExecutor(len(payloads)) as pool:
        running = [pool.submit(post, pair.url, p) for p in payloads]
        pair.wait_for(lambda h: by_id(h)[victim]["queued_requests"] >= 3,
                      "the victim has a queue")
        pair.supervisorctl("stop", program)
        assert [f.result().status for f in running] == [200] * len(payloads)
    assert "stopped: worker_01 (exit status 0)" in (pair.run_dir / "supervisord.log").read_text()
    health = pair.wait_for(lambda h: by_id(h)[victim]["state"] == "down", "victim down")
    assert health["fleet"]["handed_back"] > handed_back
    assert serving_worker(pair, decision(states(1, tag="alone ")[0])) == ids[0]

    pair.supervisorctl("start", program)
    pair.wait_for(lambda h: by_id(h)[victim]["state"] == "up"
                  and by_id(h)[victim]["pid"] != old_pid, "victim back", timeout=180)
    served = {serving_worker(pair, decision(s)) for s in states(3, tag="back ")}
    assert victim in served


def test_an_extra_worker_joins_serves_and_leaves_on_sigterm_with_exit_0(pair):
    cmd = [sys.executable, "-m", "jevfleet", "worker", "--id", "extra", "--index", "2",
           "--run-dir", str(pair.run_dir), "--port", str(pair.port), "--cores-per-worker", "1"]
    status_before = pair.health()[1]["status"]
    log = open(pair.run_dir / "extra_worker.log", "w")
    proc = subprocess.Popen(cmd, cwd=PROJECT_ROOT, stdout=log, stderr=subprocess.STDOUT)
    try:
        pair.wait_for(lambda h: by_id(h).get("extra", {}).get("state") == "up", "extra up", timeout=180)
        served = [serving_worker(pair, decision(s)) for s in states(3, tag="extra ")]
        assert "extra" in served
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
        pair.wait_for(lambda h: by_id(h)["extra"]["state"] == "down", "extra gone")
        assert pair.health()[1]["status"] == status_before == "ready"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        log.close()
