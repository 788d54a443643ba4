"""Scoring a labeled set: ask every item (in-process or through a server), summarise per kind
and overall, and write the report (summary.txt, summary.json, outcomes.jsonl, reliability.png)."""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Protocol

from tqdm import tqdm

from quality.items import Item, Skipped
from quality.metrics import Outcome, Summary, by_kind, summarize
from quality.plot import reliability_png


class Runner(Protocol):
    def ask(self, items: list[Item], progress: Callable[[int], None] = ...) -> list[Outcome | Skipped]: ...

    def close(self) -> None: ...


@dataclass
class Report:
    title: str
    outcomes: list[Outcome]
    skipped: list[Skipped]
    summaries: list[Summary]  # one per kind, then "overall"


def ask_all(runner: Runner, items: list[Item], *, desc: str = "asking",
            quiet: bool = False) -> tuple[list[Outcome], list[Skipped]]:
    with tqdm(total=len(items), desc=desc, unit="q", disable=quiet, leave=False) as bar:
        results = runner.ask(items, bar.update)
    return [r for r in results if isinstance(r, Outcome)], [r for r in results if isinstance(r, Skipped)]


def make_report(title: str, outcomes: list[Outcome], skipped: list[Skipped] = ()) -> Report:
    return Report(title=title, outcomes=outcomes, skipped=list(skipped),
                  summaries=by_kind(outcomes) if outcomes else [])


def table(summaries: list[Summary]) -> str:
    """One row per group: AUC (yes/no items only), Brier, its skill over the reference answer,
    ECE, and the p10–p90 range of the answers given."""
    width = max([22] + [len(s.name) for s in summaries])
    lines = [f"{'group':<{width}} {'n':>5} {'accuracy':>9} {'AUC':>6} {'Brier':>7} {'skill':>7} {'ECE':>6} "
             f"{'p10-p90':>11}"]
    for s in summaries:
        auc = "" if s.auc != s.auc else f"{s.auc:.3f}"  # no AUC for choice/score groups
        skill = "" if s.skill != s.skill else f"{s.skill:.3f}"
        lines.append(f"{s.name:<{width}} {s.n:>5} {s.accuracy:>9.3f} {auc:>6} {s.brier:>7.3f} {skill:>7} {s.ece:>6.3f}"
                     f" {s.p10:>5.2f}-{s.p90:<5.2f}")
    return "\n".join(lines)


def card(outcomes: list[Outcome]) -> list[Summary]:
    """The quality card's rows (docs/quality.md): yes/no and choice/score items apart, since their
    Brier scores are on different scales, per tag and then all of each."""
    tags = [t for t in ("straightforward", "adversarial") if any(o.tag == t for o in outcomes)]
    rows = []
    for tag in tags + ["all"]:
        for group, yes_no in (("yes/no", True), ("choice/score", False)):
            chosen = [o for o in outcomes if (o.type == "noul") == yes_no and tag in ("all", o.tag)]
            if chosen:
                rows.append(summarize(f"{group} {tag}", chosen))
    return rows


def describe(report: Report) -> str:
    text = [report.title, table(report.summaries) if report.summaries else "(no item answered)"]
    if any(o.tag for o in report.outcomes):
        text += ["", "quality card (docs/quality.md):", table(card(report.outcomes))]
    if report.skipped:
        text.append(f"skipped {len(report.skipped)} item(s), e.g. {report.skipped[0].id}: {report.skipped[0].reason}")
    return "\n".join(text)


def _json_safe(value):
    """NaN (an empty bin) as null, so the file is strict JSON."""
    if isinstance(value, float) and value != value:
        return None
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_json_safe(v) for v in value]
    return value


def write_report(report: Report, out_dir: Path) -> list[Path]:
    """Write the report files into out_dir (created); returns their paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written = [out_dir / "summary.txt", out_dir / "summary.json", out_dir / "outcomes.jsonl"]
    written[0].write_text(describe(report) + "\n", encoding="utf-8")
    written[1].write_text(json.dumps(_json_safe({
        "title": report.title,
        "summaries": [dataclasses.asdict(s) for s in report.summaries],
        "skipped": [dataclasses.asdict(s) for s in report.skipped],
    }), indent=1) + "\n", encoding="utf-8")
    written[2].write_text("".join(json.dumps(dataclasses.asdict(o)) + "\n" for o in report.outcomes), encoding="utf-8")
    if report.summaries:
        written.append(reliability_png(report.summaries, out_dir / "reliability.png", title=report.title,
                                       event="probability (yes/no: P(yes); choice/score: top option)"))
    return written
