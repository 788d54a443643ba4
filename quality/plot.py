"""The reliability diagram: for each kind and overall, forecast probability against how often
the event happened, one bar per non-empty bin (its width is the bin), with the diagonal a
perfectly calibrated model would follow."""
from __future__ import annotations

import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only; never a display
import matplotlib.pyplot as plt  # noqa: E402

from quality.metrics import Summary  # noqa: E402

COLUMNS = 4


def _colour(group: str) -> str:
    """Kinds blue, tags (quality.metrics.by_kind's "tag ..." rows) green, overall orange."""
    return "tab:orange" if group == "overall" else "tab:green" if group.startswith("tag ") else "tab:blue"


def reliability_png(summaries: list[Summary], path: Path, *, title: str, event: str) -> Path:
    rows = math.ceil(len(summaries) / COLUMNS)
    fig, axes = plt.subplots(rows, COLUMNS, figsize=(3.2 * COLUMNS, 3.2 * rows), squeeze=False)
    for ax, s in zip(axes.flat, summaries):
        filled = [b for b in s.bins if b.count]
        ax.bar([b.lo for b in filled], [b.frequency for b in filled], width=[b.hi - b.lo for b in filled],
               align="edge", color=_colour(s.name), edgecolor="black",
               linewidth=0.5)
        ax.plot([0, 1], [0, 1], color="gray", linestyle="--", linewidth=1)
        ax.scatter([b.mean_p for b in filled], [b.frequency for b in filled], s=[8 + 2 * b.count for b in filled],
                   color="black", zorder=3)
        ax.set_xlim(0, 1)
        ax.set_ylim(0, 1)
        ax.set_title(f"{s.name} (n={s.n})\nacc {s.accuracy:.2f}  Brier {s.brier:.3f}  ECE {s.ece:.3f}", fontsize=9)
        ax.tick_params(labelsize=7)
    for ax in list(axes.flat)[len(summaries):]:
        ax.axis("off")
    fig.supxlabel(f"forecast {event}", fontsize=9)
    fig.supylabel("observed frequency", fontsize=9)
    fig.suptitle(title, fontsize=11)
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.5 / (3.2 * rows)))  # room for the title above the first row
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
