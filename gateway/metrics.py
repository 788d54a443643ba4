"""GET /metrics: the fleet in Prometheus text format, from one scrape target (the gateway).

What the gateway sees itself is recorded as it happens: every response by route and status
(a middleware, outermost, so error pages are counted with their final status), each
Server-Timing phase as a histogram (read back from the header the request path already sets),
and the batch size each answer ran in. What only workers know (scheduler counters, snapshot
hits and misses) arrives in their heartbeats (Heartbeat.stats) and is read at scrape time,
together with queue depth and liveness from the gateway's fleet view. Worker stats are typed
(shared/messages.py WorkerStats): a heartbeat whose stats do not have that shape is not decoded.
"""
from __future__ import annotations

import re
from typing import Callable, Iterable, Iterator

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from gateway.fleet import Fleet
from gateway.queues import WorkerQueue
from shared.messages import SchedulerCounters, SnapshotStats

PHASE_BUCKETS_S = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
BATCH_BUCKETS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 64, 128, 255)
SERVER_TIMING_ENTRY = re.compile(r"\s*([A-Za-z0-9_-]+)\s*;\s*dur=([0-9.]+)")
SCHEDULER_COUNTERS = SchedulerCounters.__struct_fields__
SNAPSHOT_FIGURES = tuple(f for f in SnapshotStats.__struct_fields__ if f not in ("hits", "misses"))  # those two: below


class FleetCollector(Collector):
    """Per-worker figures, read from the fleet's state at scrape time."""

    def __init__(self, queues: Callable[[], Iterable[WorkerQueue]]) -> None:
        self.queues = queues

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        queues = list(self.queues())
        up = GaugeMetricFamily("jevfleet_worker_up", "1 while the worker takes requests, 0 draining or down",
                               labels=["worker"])
        queued_tokens = GaugeMetricFamily("jevfleet_worker_queued_tokens",
                                          "Prompt tokens sent to the worker and not yet answered", labels=["worker"])
        queued_reads = GaugeMetricFamily("jevfleet_worker_queued_reads",
                                         "Tokens the worker will read for its queue (what queue_tokens bounds)",
                                         labels=["worker"])
        queued_requests = GaugeMetricFamily("jevfleet_worker_queued_requests",
                                            "Requests sent to the worker and not yet answered", labels=["worker"])
        rate = GaugeMetricFamily("jevfleet_worker_tokens_per_second",
                                 "The worker's reading rate as the gateway measures it (moving average)",
                                 labels=["worker"])
        scheduler = CounterMetricFamily("jevfleet_worker_scheduler",
                                        "Scheduler counters the worker reports (batches, requests, tokens_read, "
                                        "expired, ...), by counter name", labels=["worker", "counter"])
        hits = CounterMetricFamily("jevfleet_snapshot_hits", "Requests whose prefix was read from a snapshot",
                                   labels=["worker"])
        misses = CounterMetricFamily("jevfleet_snapshot_misses", "Requests whose prefix had no snapshot",
                                     labels=["worker"])
        ratio = GaugeMetricFamily("jevfleet_snapshot_hit_ratio", "hits / (hits + misses) since the worker started",
                                  labels=["worker"])
        snapshot = GaugeMetricFamily("jevfleet_snapshot", "Other snapshot figures the worker reports "
                                     "(kept, bytes, reused tokens, ...), by name", labels=["worker", "name"])
        for q in queues:
            wid, stats = q.worker_id, q.worker.stats
            up.add_metric([wid], 1.0 if q.worker.up else 0.0)
            queued_tokens.add_metric([wid], q.queued_tokens)
            queued_reads.add_metric([wid], q.queued_reads)
            queued_requests.add_metric([wid], q.queued_requests)
            rate.add_metric([wid], q.tokens_per_s)
            for name in SCHEDULER_COUNTERS:
                scheduler.add_metric([wid, name], getattr(stats, name))
            snaps = stats.state_snapshots
            hits.add_metric([wid], snaps.hits)
            misses.add_metric([wid], snaps.misses)
            if snaps.hits + snaps.misses:
                ratio.add_metric([wid], snaps.hits / (snaps.hits + snaps.misses))
            for name in SNAPSHOT_FIGURES:
                snapshot.add_metric([wid, name], getattr(snaps, name))
        yield GaugeMetricFamily("jevfleet_workers_up", "Workers heartbeating now",
                                value=sum(1 for q in queues if q.worker.up))
        yield from (up, queued_tokens, queued_reads, queued_requests, rate, scheduler, hits, misses, ratio, snapshot)


class Metrics:
    """The gateway's registry (one per app, so several apps in one process do not collide)."""

    def __init__(self, fleet: Fleet) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter("jevfleet_http_requests", "HTTP responses by route and status",
                                ["route", "method", "status"], registry=self.registry)
        self.phases = Histogram("jevfleet_request_phase_seconds", "Time per Server-Timing phase of "
                                "answered (2xx) requests; total = the whole request", ["phase"],
                                buckets=PHASE_BUCKETS_S, registry=self.registry)
        self.batch = Histogram("jevfleet_batch_requests", "Requests in the worker batch that answered a request",
                               buckets=BATCH_BUCKETS, registry=self.registry)
        self.registry.register(FleetCollector(lambda: list(fleet.queues.values())))

    def observe_response(self, route: str, method: str, response: web.StreamResponse) -> None:
        self.requests.labels(route, method, str(response.status)).inc()
        if not 200 <= response.status < 300:
            return  # refused requests would mix their short phases into the answers' latency
        for phase, ms in SERVER_TIMING_ENTRY.findall(response.headers.get("Server-Timing", "")):
            self.phases.labels(phase).observe(float(ms) / 1000)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


METRICS = web.AppKey("metrics", Metrics)


def route_of(request: web.Request) -> str:
    """The route template (bounded label values), not the raw path a client made up."""
    resource = request.match_info.route.resource
    return resource.canonical if resource is not None else "unmatched"


@web.middleware
async def count_responses(request: web.Request, handler) -> web.StreamResponse:
    response = await handler(request)
    request.app[METRICS].observe_response(route_of(request), request.method, response)
    return response


def record_batch(request: web.Request, batch_requests: int) -> None:
    """Called on the request path once a worker's result is in."""
    request.app[METRICS].batch.observe(batch_requests)


async def metrics_endpoint(request: web.Request) -> web.Response:
    return web.Response(body=request.app[METRICS].exposition(), headers={"Content-Type": CONTENT_TYPE_LATEST})


def install(app: web.Application, fleet: Fleet) -> None:
    """Register /metrics and the response counter (outermost middleware) on `app`."""
    app[METRICS] = Metrics(fleet)
    app.middlewares.insert(0, count_responses)
    app.router.add_get("/metrics", metrics_endpoint)
