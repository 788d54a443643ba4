"""From Locust's per-run JSON stats to table rows, results.md and the throughput/latency plot.

Locust keeps response times as a histogram (ms, rounded to 2 significant digits above 100 ms);
percentiles are read from it with the harness's one percentile (jevfleet/harness/stats.py), the
definition Locust itself uses. This module does not import locust:
importing it monkey-patches the process with gevent, which the sweep process must not be.

Little's law check: in a closed loop with no think time, the requests in the system L = λ·W
(λ = completed requests per second, W = mean response time) should come out close to the
number of users; much less means the clients, not the server, were the bottleneck (or users
waited out Retry-After).
"""
from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from jevfleet.harness.stats import percentile

ANSWER, SHED = "answer", "shed"


@dataclass(frozen=True)
class Row:
    target: str
    workload: str
    users: int
    seconds: float
    answered: int  # requests answered validly
    errors: int  # failed requests and invalid answers
    shed: int  # 429/503
    p50_ms: float
    p90_ms: float
    p99_ms: float
    mean_ms: float  # over every completed request, shed included (the W of Little's law)
    queue_ms: float | None = None  # our fleet only (from /metrics): mean wait for the scheduler
    inference_ms: float | None = None  # ... mean run time of the batch an answer was in
    batch: float | None = None  # ... mean requests per batch, as answers saw it
    questions: int | None = None  # questions in the valid answers (None: one per request)

    @property
    def rps(self) -> float:
        """Validly answered requests per second."""
        return self.answered / self.seconds

    @property
    def qps(self) -> float:
        """Answers per second counted per question (W4 asks 20 in a request; a choice is one)."""
        return (self.answered if self.questions is None else self.questions) / self.seconds

    @property
    def littles_l(self) -> float:
        """L = λ·W over every completed request."""
        return (self.answered + self.errors + self.shed) / self.seconds * self.mean_ms / 1000


def histogram_percentile(histogram: dict[int, int], fraction: float) -> float:
    """The harness's percentile over a Locust histogram ({ms: requests}): the same definition
    Locust applies, so our table and Locust's own report agree."""
    return percentile(list(histogram), fraction, counts=list(histogram.values()))


def row_from_locust_json(paths: list[Path], *, target: str, workload: str, users: int, seconds: float) -> Row:
    """Locust's --json-file outputs (a list of stats entries, one per request name) of one or
    more runs of one cell, pooled: counts added, histograms merged; `seconds` is their total."""
    entries = [e for path in paths for e in json.loads(path.read_text())]

    def total(name: str | None, key: str) -> int:
        return sum(e.get(key) or 0 for e in entries if name is None or e["name"] == name)

    histogram: Counter[int] = Counter()
    for e in entries:
        if e["name"] == ANSWER:
            histogram.update({int(ms): n for ms, n in e.get("response_times", {}).items()})
    n_all, failures = total(None, "num_requests"), total(ANSWER, "num_failures")
    # locustfile.py sets an answer's response length to the questions it answered
    questions = [e.get("total_content_length") for e in entries if e["name"] == ANSWER]
    return Row(
        target=target, workload=workload, users=users, seconds=seconds,
        answered=total(ANSWER, "num_requests") - failures,
        errors=total(None, "num_failures"),
        shed=total(SHED, "num_requests"),
        p50_ms=histogram_percentile(histogram, 0.50), p90_ms=histogram_percentile(histogram, 0.90),
        p99_ms=histogram_percentile(histogram, 0.99),
        mean_ms=total(None, "total_response_time") / n_all if n_all else float("nan"),
        questions=None if not questions or None in questions else int(sum(questions)),
    )


HEADER = ("| target | workload | users | req/s | answers/s | p50 ms | p90 ms | p99 ms | errors | shed | L = λ·W "
          "| L / users | queue ms | inference ms | batch |\n"
          "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")


def _opt(value: float | None, fmt: str) -> str:
    return "–" if value is None else format(value, fmt)


def table_line(row: Row) -> str:
    return (f"| {row.target} | {row.workload} | {row.users} | {row.rps:.2f} | {row.qps:.2f} | {row.p50_ms:.0f} "
            f"| {row.p90_ms:.0f} | {row.p99_ms:.0f} | {row.errors} | {row.shed} | {row.littles_l:.2f} | {row.littles_l / row.users:.2f} "
            f"| {_opt(row.queue_ms, '.0f')} | {_opt(row.inference_ms, '.0f')} | {_opt(row.batch, '.1f')} |")


def markdown_table(rows: Iterable[Row]) -> str:
    return "\n".join([HEADER, *(table_line(r) for r in rows)])


def write_results(rows: list[Row], out: Path, *, command: str, machine: str) -> Path:
    path = out / "results.md"
    path.write_text(
        "# Load sweep results\n\n"
        f"Command: `{command}`\n\nMachine: {machine}\n\n"
        "Closed loop (no think time); req/s counts validly answered requests, answers/s the questions in them "
        "(W4 asks 20 noul questions a request, or one 255-option choice); percentiles are over answered requests; "
        "errors = failed requests + invalid answers; shed = 429/503. Little's law: L = λ·W over all "
        "completed requests, expected ≈ users. queue/inference/batch: means over the run from our fleet's "
        "/metrics (Server-Timing phases and batch size).\n\n"
        f"{markdown_table(rows)}\n\n![throughput and latency](throughput_latency.png)\n"
    )
    return path


def plot(rows: list[Row], out: Path) -> Path:
    """Answers/s per question (left) and p50/p99 latency (right) against users; one colour per
    target and workload."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    fig, (ax_rps, ax_lat) = plt.subplots(1, 2, figsize=(11, 4.8))
    for target, workload in sorted({(r.target, r.workload) for r in rows}):
        pts = sorted((r for r in rows if (r.target, r.workload) == (target, workload)), key=lambda r: r.users)
        users = [r.users for r in pts]
        line, = ax_rps.plot(users, [r.qps for r in pts], marker="o", label=f"{target} {workload}")
        ax_lat.plot(users, [r.p50_ms for r in pts], marker="o", color=line.get_color())
        ax_lat.plot(users, [r.p99_ms for r in pts], marker="^", linestyle="--", color=line.get_color())
    ax_rps.set(xlabel="concurrent users (closed loop)", ylabel="answers / s", title="Throughput")
    ax_rps.set_ylim(bottom=0)
    ax_lat.set(xlabel="concurrent users (closed loop)", ylabel="latency (ms), log scale",
               title="Latency: p50 (solid), p99 (dashed)", yscale="log")
    ax_lat.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))
    ax_lat.yaxis.set_minor_formatter(matplotlib.ticker.FuncFormatter(
        lambda v, _: f"{v:g}" if f"{v:g}"[0] in "25" else ""))
    ticks = sorted({r.users for r in rows})
    for ax in (ax_rps, ax_lat):
        ax.set_xscale("log", base=2)
        ax.set_xticks(ticks, labels=[str(u) for u in ticks])
        ax.grid(True, alpha=0.3)
    fig.legend(loc="lower center", ncol=min(6, len(ax_rps.lines)), fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    path = out / "throughput_latency.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
