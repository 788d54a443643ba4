"""GET /metrics: parsed with prometheus-client's own parser, unit-level and against the real fleet."""
from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace

import pytest
from aiohttp import web
from prometheus_client.parser import text_string_to_metric_families

from client.net import http, post_json
from gateway.membership import WorkerState
from gateway.metrics import Metrics
from gateway.queues import WorkerQueue
from jevfleet.harness.fleet import Fleet
from jevfleet.harness.load import by_id
from jevfleet.harness.processes import paused, wait_until
from shared.messages import Heartbeat, SchedulerCounters, SnapshotStats, WorkerStats


def families(text: str) -> dict:
    return {f.name: f for f in text_string_to_metric_families(text)}


def sample(fams: dict, family: str, series: str | None = None, **labels) -> float:
    """The one sample of `family` (series `series`, default the family name) with these labels."""
    found = [s.value for s in fams[family].samples
             if s.name == (series or family) and all(s.labels.get(k) == v for k, v in labels.items())]
    assert len(found) == 1, (family, series, labels, fams[family].samples)
    return found[0]


def worker(worker_id: str, stats: WorkerStats, state: str = "up") -> WorkerQueue:
    status = Heartbeat(worker_id=worker_id, pid=1, cores=[0], serves={}, stats=stats)
    return WorkerQueue(WorkerState(status=status, identity=b"", last_seen=time.monotonic(), state=state), 16)


def test_worker_stats_are_exported_from_their_typed_fields():
    workers = {
        "a": worker("a", WorkerStats(batches=3, requests=7, queued_requests=2,
                                     state_snapshots=SnapshotStats(hits=6, misses=2, kept=4, bytes=1024))),
        "b": worker("b", WorkerStats(batches=1), state="draining"),
        "c": worker("c", WorkerStats()),  # nothing run yet: every counter at 0, no hit ratio
    }
    fams = families(Metrics(SimpleNamespace(queues=workers)).exposition().decode())

    assert sample(fams, "jevfleet_workers_up") == 2
    assert sample(fams, "jevfleet_worker_up", worker="b") == 0
    assert sample(fams, "jevfleet_worker_scheduler", "jevfleet_worker_scheduler_total",
                  worker="a", counter="requests") == 7
    assert {s.labels["counter"] for s in fams["jevfleet_worker_scheduler"].samples
            if s.labels["worker"] == "a" and s.name.endswith("_total")} == set(SchedulerCounters.__struct_fields__)
    assert sample(fams, "jevfleet_snapshot_hits", "jevfleet_snapshot_hits_total", worker="a") == 6
    assert sample(fams, "jevfleet_snapshot_misses", "jevfleet_snapshot_misses_total", worker="a") == 2
    assert sample(fams, "jevfleet_snapshot_hit_ratio", worker="a") == pytest.approx(0.75)
    assert sample(fams, "jevfleet_snapshot", worker="a", name="bytes") == 1024
    assert {s.labels["name"] for s in fams["jevfleet_snapshot"].samples if s.labels["worker"] == "a"} == \
        set(SnapshotStats.__struct_fields__) - {"hits", "misses"}
    assert not [s for s in fams["jevfleet_snapshot_hit_ratio"].samples if s.labels["worker"] != "a"]
    assert sample(fams, "jevfleet_worker_queued_requests", worker="a") == 0  # the gateway's count, not the worker's
    assert sample(fams, "jevfleet_worker_queued_tokens", worker="c") == 0
    assert sample(fams, "jevfleet_worker_queued_reads", worker="c") == 0
    assert sample(fams, "jevfleet_worker_tokens_per_second", worker="c") > 0


def test_server_timing_phases_become_histograms():
    metrics = Metrics(SimpleNamespace(queues={}))
    response = web.Response(headers={"Server-Timing": "parse;dur=0.20, queue;dur=40.00, total;dur=1500.5"})
    metrics.observe_response("/v1/systemone", "POST", response)
    fams = families(metrics.exposition().decode())

    phases = fams["jevfleet_request_phase_seconds"]
    assert sample(fams, "jevfleet_request_phase_seconds", "jevfleet_request_phase_seconds_sum",
                  phase="total") == pytest.approx(1.5005)
    assert sample(fams, "jevfleet_request_phase_seconds", "jevfleet_request_phase_seconds_bucket",
                  phase="queue", le="0.05") == 1
    assert {s.labels["phase"] for s in phases.samples} == {"parse", "queue", "total"}
    assert sample(fams, "jevfleet_http_requests", "jevfleet_http_requests_total",
                  route="/v1/systemone", method="POST", status="200") == 1
    metrics.observe_response("/v1/systemone", "POST", web.Response(status=422, headers={
        "Server-Timing": "parse;dur=0.20, validate;dur=0.1, total;dur=0.4"}))
    fams = families(metrics.exposition().decode())
    assert sample(fams, "jevfleet_request_phase_seconds", "jevfleet_request_phase_seconds_count",
                  phase="total") == 1  # refused requests are counted by status, not timed
    assert sample(fams, "jevfleet_http_requests", "jevfleet_http_requests_total",
                  route="/v1/systemone", method="POST", status="422") == 1


@pytest.mark.fleet
def test_metrics_of_the_real_fleet(fleet: Fleet):
    body = {"model": "jev-latest", "state": "The lamp is on.", "questions": {"q": {"type": "noul",
                                                                                    "instructions": "Is it on?"}}}
    assert post_json(fleet.url + "/v1/systemone", body)[0] == 200
    assert http("GET", fleet.url + "/no/such/path")[0] == 404
    status, headers, raw = http("GET", fleet.url + "/metrics", headers={"Authorization": "Bearer wrong"})
    assert status == 200
    assert headers["Content-Type"].startswith("text/plain; version=")
    fams = families(raw.decode())

    answered = sample(fams, "jevfleet_http_requests", "jevfleet_http_requests_total",
                      route="/v1/systemone", method="POST", status="200")
    assert answered >= 1
    assert sample(fams, "jevfleet_http_requests", "jevfleet_http_requests_total",
                  route="unmatched", method="GET", status="404") >= 1
    for phase in ("parse", "validate", "tokenize", "queue", "inference", "outside", "respond", "total"):
        assert sample(fams, "jevfleet_request_phase_seconds", "jevfleet_request_phase_seconds_count",
                      phase=phase) >= 1
    assert sample(fams, "jevfleet_batch_requests", "jevfleet_batch_requests_count") >= 1
    assert sample(fams, "jevfleet_workers_up") == 1
    (wid,) = {s.labels["worker"] for s in fams["jevfleet_worker_up"].samples}
    # The queue gauges are the gateway's own count: one request while it waits at the paused worker
    # (the worker's own count, in its heartbeats, stays 0 then), none once it is answered.
    pid = by_id(fleet.health()[1])[wid]["pid"]
    with ThreadPoolExecutor(1) as pool:
        with paused([pid]):  # a child of the fleet's supervisord; paused far less than dead_after_s
            waiting = pool.submit(post_json, fleet.url + "/v1/systemone", body)
            fleet.wait_for(lambda h: by_id(h)[wid]["queued_requests"] == 1, "the request queued at the worker")
            fams = families(http("GET", fleet.url + "/metrics")[2].decode())
            assert sample(fams, "jevfleet_worker_queued_requests", worker=wid) == 1
            assert sample(fams, "jevfleet_worker_queued_tokens", worker=wid) > 0
        assert waiting.result()[0] == 200
    fams = families(http("GET", fleet.url + "/metrics")[2].decode())
    assert sample(fams, "jevfleet_worker_queued_requests", worker=wid) == 0
    # The worker's counters arrive with its heartbeats: wait for one sent after our answer.
    fams = wait_until(lambda: families(http("GET", fleet.url + "/metrics")[2].decode()), "a heartbeat counting it",
                      done=lambda f: sample(f, "jevfleet_worker_scheduler", "jevfleet_worker_scheduler_total",
                                            worker=wid, counter="requests") >= 1, timeout=10)
    hits = sample(fams, "jevfleet_snapshot_hits", "jevfleet_snapshot_hits_total", worker=wid)
    misses = sample(fams, "jevfleet_snapshot_misses", "jevfleet_snapshot_misses_total", worker=wid)
    assert hits + misses >= 1

    def kept() -> tuple[float, int]:
        exported = sample(families(http("GET", fleet.url + "/metrics")[2].decode()), "jevfleet_snapshot",
                          worker=wid, name="kept")
        return exported, by_id(fleet.health()[1])[wid]["stats"]["state_snapshots"]["kept"]

    # the figure the worker reported, as /health shows it (polled: a heartbeat may come between the reads)
    exported, reported = wait_until(kept, "/metrics and /health agreeing", done=lambda k: k[0] == k[1], timeout=10,
                                    every=0.1)
    assert exported >= 1  # the pinned preamble at least
