"""Black-box: processes of a real fleet killed and stopped under load. A SIGKILLed worker loses
no request and comes back; a SIGTERMed gateway finishes what it accepted and exits 0."""
from __future__ import annotations

import os
import re
import signal
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from jevfleet.harness.fleet import CHECKED, Fleet, start_fleet
from jevfleet.harness.load import by_id, closed_loop, decision, noul, post, program_pid, served_by, states, workers
from jevfleet.harness.processes import paused, wait_until

pytestmark = pytest.mark.fleet


@pytest.fixture(scope="module")
def duo(tmp_path_factory: pytest.TempPathFactory) -> Fleet:
    # A long deadline: these tests assert that nothing is lost, and a machine busy with other
    # work must not turn slowness into 503s.
    f = start_fleet(tmp_path_factory.mktemp("duo"), workers=2,
                    extra=["--cores-per-worker", "1", "--deadline-s", "120", *CHECKED])
    yield f
    assert f.stop() == 0, f.logs()
    assert not f.lifecycle_breaches()


def test_sigkill_of_a_worker_under_load_loses_no_request_and_it_comes_back(duo):
    payloads = [decision(s) for s in states(8, tag="kill ")]
    with ThreadPoolExecutor(2) as pool:  # the quiet fleet's answers (deterministic mode: bit-identical)
        reference = [noul(o) for o in pool.map(lambda p: post(duo.url, p), payloads)]
    victim = sorted(workers(duo))[1]
    old_pid = workers(duo)[victim]["pid"]
    served_before = served_by(duo)

    stop, outcomes = threading.Event(), []
    loader = threading.Thread(target=lambda: outcomes.extend(closed_loop(duo.url, payloads, 4, stop)))
    loader.start()
    try:
        duo.wait_for(lambda h: all(w["served"] > served_before[w["id"]] and w["queued_requests"] >= 1
                                   for w in h["workers"]), "both workers busy")
        killed_at = time.monotonic()
        os.kill(old_pid, signal.SIGKILL)  # a child of the supervisord this test started
        duo.wait_for(lambda h: by_id(h)[victim]["state"] == "up" and by_id(h)[victim]["pid"] != old_pid,
                     "restarted worker registered", timeout=180)
        back_at = time.monotonic()
        duo.wait_for(lambda h: by_id(h)[victim]["served"] >= 1, "restarted worker serving")
    finally:
        stop.set()
        loader.join()

    assert len(outcomes) > len(payloads)
    wrong = [(o.index, o.status, o.body) for o in outcomes if o.status != 200 or noul(o) != reference[o.index]]
    assert not wrong, wrong[:3]
    view = duo.health()[1]["fleet"]
    assert view["resent"] >= 1  # the victim did hold requests
    assert view["lifecycle_checks"] > len(outcomes) and view["lifecycle_breaches"] == 0, view
    in_flight = [o for o in outcomes if o.started < killed_at < o.ended]
    reserved = re.findall(r"re-served (\d+) ms after", (duo.run_dir / "gateway.log").read_text())
    print(f"\nSIGKILL under load: {len(outcomes)} requests, 0 lost; in flight at the kill all answered "
          f"{(max(o.ended for o in in_flight) - killed_at) * 1000:.0f} ms after it; gateway: resent requests "
          f"answered {max(map(int, reserved), default=-1)} ms after the loss was detected; "
          f"worker back in service after {back_at - killed_at:.1f} s")


def refuses_connections(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return False
    except OSError:
        return True


def test_sigterm_to_the_gateway_finishes_in_flight_requests_and_exits_0(duo):
    pids = {w["id"]: w["pid"] for w in workers(duo).values()}
    payloads = [decision(s) for s in states(4, tag="last ", words=600)]
    with ThreadPoolExecutor(4) as pool:
        running = [pool.submit(post, duo.url, p) for p in payloads]
        duo.wait_for(lambda h: h["fleet"]["inflight"] == 4, "requests in flight")
        stopper = threading.Thread(target=duo.supervisorctl, args=("stop", "gateway"))
        with paused(pids.values()):  # the workers' children of our supervisord: nothing is answered meanwhile
            stopper.start()
            wait_until(lambda: refuses_connections(duo.port), "the gateway's port closed", timeout=30, every=0.05)
            assert not any(f.done() for f in running)  # closed, and every request still owed its answer
        assert [f.result().status for f in running] == [200] * 4
        stopper.join()
    assert "stopped: gateway (exit status 0)" in (duo.run_dir / "supervisord.log").read_text()

    duo.supervisorctl("start", "gateway")  # the workers were never restarted: they register again
    health = duo.wait_for(lambda h: h.get("status") == "ready", "ready again")
    assert {w["id"]: w["pid"] for w in health["workers"]} == pids
    assert post(duo.url, decision(states(1, tag="after ")[0])).status == 200



def test_sigterm_to_the_whole_fleet_stops_the_gateway_first_and_loses_nothing(tmp_path):
    """make serve's Ctrl-C: supervisord stops the gateway before the workers (conf/supervisord.conf's
    priorities), so what the gateway accepted is answered by workers still running. Stopped the
    other way round, the one worker would hand its queue back to a gateway with no worker left,
    and those requests would wait for their deadline and get 503."""
    fleet = start_fleet(tmp_path, workers=1, extra=["--deadline-s", "60", *CHECKED])
    pids = [w["pid"] for w in workers(fleet).values()]
    payloads = [decision(s) for s in states(4, tag="whole fleet ", words=600)]
    with ThreadPoolExecutor(4) as pool:
        running = [pool.submit(post, fleet.url, p) for p in payloads]
        with paused(pids):  # every request accepted and owed its answer before the SIGTERM
            fleet.wait_for(lambda h: h["fleet"]["inflight"] == 4, "requests in flight")
        code = fleet.stop()
        assert [f.result().status for f in running] == [200] * 4
    assert code == 0, fleet.logs()
    log = (tmp_path / "supervisord.log").read_text()
    assert log.index("stopped: gateway") < log.index("stopped: worker_00"), log[-2000:]

def log_lines_after(path, text: str, since: float) -> list[tuple[float, str]]:
    """The lines of `path` containing `text` logged from `since` (time.time()) on, each with its
    seconds after `since`."""
    found = []
    for line in path.read_text().splitlines():
        if text in line:
            stamp = time.mktime(time.strptime(line[:19], "%Y-%m-%d %H:%M:%S")) + int(line[20:23]) / 1000
            if stamp >= since - 0.01:  # the stamp is cut to the millisecond
                found.append((stamp - since, line))
    return found


def test_sigkill_of_the_gateway_under_load_fails_only_what_was_in_flight_and_workers_drop_the_orphans(duo):
    pids = {w["id"]: w["pid"] for w in workers(duo).values()}
    gateway_pid = program_pid(duo, "gateway")
    # distinct states longer than a batch's token budget (about 500 tokens against 384): each batch
    # holds one request, so of the 5 or more requests the workers hold at the kill, 3 or more are
    # queued, and a worker sees the drop long before its running batch ends
    payloads = [decision(s) for s in states(200, tag="gwkill ", words=400)]
    stop, outcomes = threading.Event(), []
    loader = threading.Thread(target=lambda: outcomes.extend(closed_loop(duo.url, payloads, 6, stop)))
    loader.start()
    try:
        duo.wait_for(lambda h: h["fleet"]["inflight"] >= 5, "requests in flight and queued")
        killed_at, killed_wall = time.monotonic(), time.time()
        os.kill(gateway_pid, signal.SIGKILL)  # a child of the supervisord this test started
        health = duo.wait_for(lambda h: h.get("status") == "ready", "gateway back, workers registered", timeout=60)
        back_at = time.monotonic()  # the new gateway counts `served` from 0
        duo.wait_for(lambda h: sum(w["served"] for w in h["workers"]) >= 6, "requests answered after the restart")
    finally:
        stop.set()
        loader.join()

    assert program_pid(duo, "gateway") != gateway_pid
    assert {w["id"]: w["pid"] for w in health["workers"]} == pids  # the workers were not restarted
    assert health["fleet"]["lifecycle_checks"] > 0 and health["fleet"]["lifecycle_breaches"] == 0
    in_flight = [o for o in outcomes if o.started < killed_at < o.ended]
    assert in_flight and all(o.status == 0 for o in in_flight)  # a connection error: documented in docs/fleet.md
    later = [o for o in outcomes if o.started > back_at]
    assert later and all(o.status == 200 for o in later), [(o.status, o.body) for o in later if o.status != 200][:3]
    drops = [log_lines_after(duo.run_dir / f"worker_{w:02d}.log", "gateway connection lost", killed_wall)
             for w in (0, 1)]
    assert all(drops), "each worker noticed the dead gateway"
    dropped = [int(re.search(r"dropped (\d+) queued", lines[0][1]).group(1)) for lines in drops]
    # the orphans queued behind the running batches were dropped, and only requests that were in flight
    assert 1 <= sum(dropped) <= len(in_flight), (dropped, len(in_flight))
    print(f"\ngateway SIGKILL under load: {len(in_flight)} requests in flight got a connection error; the workers saw "
          f"the drop {max(lines[0][0] for lines in drops):.2f} s after the kill and dropped "
          f"{dropped} queued requests (orphaned work left: the batch each was running); gateway ready again "
          f"{back_at - killed_at:.1f} s after the kill")
