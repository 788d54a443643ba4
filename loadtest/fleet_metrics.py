"""Where our fleet's latency went during some runs: scrapes of its /metrics before and after each, differenced and added up.

The Server-Timing histograms split each answer into queue time (waiting for the worker's
scheduler) and inference time (the batch it ran in); their growth with users is the queueing
the table's percentiles only show in total.
"""
from __future__ import annotations

from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

from client.net import probe

PHASE = "jevfleet_request_phase_seconds"
BATCH = "jevfleet_batch_requests"


@dataclass(frozen=True)
class Breakdown:
    queue_ms: float
    inference_ms: float
    batch: float  # mean requests per worker batch, as answers saw it


def scrape(url: str) -> dict[tuple[str, str], float]:
    """{(series, phase label or ""): value} of the _sum and _count series we use; {} if unreachable."""
    status, _, body = probe("GET", url + "/metrics")
    if status != 200:
        return {}
    values: dict[tuple[str, str], float] = {}
    for family in text_string_to_metric_families(body.decode()):
        if family.name in (PHASE, BATCH):
            for s in family.samples:
                if s.name.endswith(("_sum", "_count")):
                    values[(s.name, s.labels.get("phase", ""))] = s.value
    return values


def growth(before: dict[tuple[str, str], float], after: dict[tuple[str, str], float]) -> dict[tuple[str, str], float]:
    """What each series grew by between two scrapes; growths of several runs add up."""
    return {key: value - before.get(key, 0.0) for key, value in after.items()}


def breakdown(grown: dict[tuple[str, str], float]) -> Breakdown | None:
    """Mean queue and inference time and batch size over the answers counted in `grown`."""
    def mean(series: str, label: str = "") -> float | None:
        count, total = grown.get((f"{series}_count", label), 0), grown.get((f"{series}_sum", label), 0)
        return total / count if count > 0 else None

    queue, inference, batch = mean(PHASE, "queue"), mean(PHASE, "inference"), mean(BATCH)
    if queue is None or inference is None or batch is None:
        return None
    return Breakdown(queue_ms=queue * 1000, inference_ms=inference * 1000, batch=batch)
