"""loadtest.results: percentiles from Locust's histogram, rows, Little's law, the table."""
from __future__ import annotations

import json
import math

import pytest

from loadtest.results import Row, histogram_percentile, markdown_table, plot, row_from_locust_json


def test_percentile_reads_the_histogram():
    hist = {10: 50, 20: 40, 100: 9, 900: 1}
    assert [histogram_percentile(hist, f) for f in (0.5, 0.9, 0.99, 1.0)] == [10, 20, 100, 900]
    assert math.isnan(histogram_percentile({}, 0.5))


def test_a_row_from_locust_stats_counts_shed_apart_from_errors(tmp_path):
    stats = [
        {"name": "answer", "num_requests": 12, "num_failures": 2, "total_response_time": 12 * 500.0,
         "response_times": {"400": 6, "500": 4, "900": 2}, "total_content_length": 10 * 20},
        {"name": "shed", "num_requests": 3, "num_failures": 0, "total_response_time": 3 * 10.0,
         "response_times": {"10": 3}},
    ]
    path = tmp_path / "stats.json"
    path.write_text(json.dumps(stats))
    row = row_from_locust_json([path], target="jevfleet", workload="W1", users=4, seconds=5.0)
    assert (row.answered, row.errors, row.shed) == (10, 2, 3)
    assert row.rps == 2.0 and row.qps == 40.0  # locustfile.py: an answer's length = its questions
    assert (row.p50_ms, row.p90_ms, row.p99_ms) == (400, 900, 900)
    assert row.littles_l == pytest.approx((15 / 5.0) * (6030 / 15 / 1000))  # λ · W over every completed request
    table = markdown_table([row])
    assert "| jevfleet | W1 | 4 | 2.00 | 40.00 | 400 | 900 | 900 | 2 | 3 | 1.21 | 0.30 | – | – | – |" in table


def test_rounds_of_one_cell_pool_into_one_row(tmp_path):
    """sweep --rounds: counts add up, histograms merge, the seconds are the rounds' total."""
    paths = []
    for k, times in enumerate(({"100": 3}, {"300": 1, "400": 2})):
        n = sum(times.values())
        paths.append(tmp_path / f"r{k}.json")
        paths[-1].write_text(json.dumps([{"name": "answer", "num_requests": n, "num_failures": k,
                                          "total_response_time": 100.0 * n, "response_times": times,
                                          "total_content_length": n - k}]))
    row = row_from_locust_json(paths, target="llama-server", workload="W3", users=1, seconds=40.0)
    assert (row.answered, row.errors, row.shed, row.questions) == (5, 1, 0, 5)
    assert (row.p50_ms, row.p99_ms) == (100, 400)  # 100 ms x3, 300 x1, 400 x2 over both runs
    assert row.rps == 5 / 40.0


def test_plot_writes_a_png(tmp_path):
    rows = [Row(target=t, workload="W1", users=u, seconds=1, answered=u * k, errors=0, shed=0,
                p50_ms=100 * u, p90_ms=150 * u, p99_ms=200 * u, mean_ms=100 * u)
            for t, k in (("jevfleet", 3), ("llama-cpp-python", 1)) for u in (1, 2, 4)]
    assert plot(rows, tmp_path).read_bytes()[:4] == b"\x89PNG"


def test_fleet_metrics_growth_of_several_runs_adds_up():
    """fleet_metrics: per-run growths summed, then one mean over all of them."""
    from collections import Counter

    from loadtest.fleet_metrics import BATCH, PHASE, breakdown, growth

    def scrape(n: int, queue_s: float, inference_s: float) -> dict:
        return {(f"{PHASE}_count", "queue"): n, (f"{PHASE}_sum", "queue"): queue_s,
                (f"{PHASE}_count", "inference"): n, (f"{PHASE}_sum", "inference"): inference_s,
                (f"{BATCH}_count", ""): n, (f"{BATCH}_sum", ""): 2.0 * n}

    total = Counter(growth(scrape(10, 1.0, 5.0), scrape(20, 1.5, 6.0)))  # 10 answers: 50 ms queue, 100 ms inference
    total.update(growth(scrape(20, 1.5, 6.0), scrape(50, 2.1, 15.0)))  # 30 answers: 20 ms, 300 ms
    split = breakdown(total)
    assert split is not None
    assert (split.queue_ms, split.inference_ms, split.batch) == pytest.approx((1100 / 40, 10000 / 40, 2.0))
    assert breakdown({}) is None
