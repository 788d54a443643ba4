"""How far a profile's answers are from the relations probabilities must satisfy (docs/quality.md).

    python -m quality.coherence [--profile smollm2-135m] [--head on|off|profile]

On the test half of the choice/score items (eval/choice_score.jsonl + eval/generated.jsonl),
in-process, from the raw P(yes) of each job (calibration applied, before any normalising):

- choice: its options asked as yes/no questions are exclusive and exhaustive, so their P(yes)
  should sum to 1 (|Σ − 1|); the wire answer is normalised, so it sums to 1 by construction.
- merge: the first two options of a choice merged into one ("A or B") should get the sum of
  their two probabilities in the original choice (|P(A or B) − P(A) − P(B)|, both normalised).
- score: P(level ≥ k) should not increase with k; the share of adjacent pairs that do, and the
  mean change pool-adjacent-violators makes to restore it (the wire answer is monotone by
  construction).
"""
from __future__ import annotations

import argparse
import dataclasses

import numpy as np

from gateway.answers import p_yes, pool_adjacent_violators
from quality.items import Item, Skipped, load_set
from quality.local import LocalRunner
from shared.config import load_settings
from shared.derive import serving_profile
from shared.profiles import HEAD_CHOICES

SETS = ["eval/choice_score.jsonl", "eval/generated.jsonl"]


def merged(item: Item) -> Item:
    """The choice with its first two options merged into one."""
    (a, about_a), (b, about_b), *rest = item.criteria.items()
    about = "; ".join(t for t in (about_a, about_b) if t) or None
    criteria = {f"{a} or {b}": about, **dict(rest)}
    answer = f"{a} or {b}" if item.answer in (a, b) else item.answer
    return dataclasses.replace(item, id=item.id + "-merged", criteria=criteria, answer=answer)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default="")
    parser.add_argument("--head", choices=tuple(HEAD_CHOICES), default="profile")
    args = parser.parse_args()
    settings = load_settings({"profile": args.profile} if args.profile else None)
    profile = serving_profile(settings, head=HEAD_CHOICES[args.head])
    items = [i for i in load_set(SETS, "test") if i.type in ("choice", "score")]
    merges = [merged(i) for i in items if i.type == "choice" and len(i.criteria) >= 3]
    runner = LocalRunner(settings, profile)
    try:
        answers = dict(zip([i.id for i in items + merges], runner.ask(items + merges)))
    finally:
        runner.close()
    skipped = [a for a in answers.values() if isinstance(a, Skipped)]  # refused: no margins to compare
    answers = {item_id: a for item_id, a in answers.items() if not isinstance(a, Skipped)}
    items = [i for i in items if i.id in answers]
    merges = [m for m in merges if m.id in answers and m.id.removesuffix("-merged") in answers]
    sums, merge_gaps, violations, pairs, pav = [], [], 0, 0, []
    for item in items:
        ps = [p_yes(profile, m) for m in runner.margins[item.id]]
        if item.type == "choice":
            sums.append(abs(sum(ps) - 1.0))
        else:
            violations += sum(b > a for a, b in zip(ps, ps[1:]))
            pairs += len(ps) - 1
            pav.append(float(np.mean(np.abs(np.array(ps) - pool_adjacent_violators(ps)))))
    for m in merges:
        original = answers[m.id.removesuffix("-merged")].probs
        merge_gaps.append(abs(answers[m.id].probs[0] - original[0] - original[1]))
    head = " with its head" if profile.head else ""
    print(f"profile {profile.name}{head}, test half: {len(items)} choice/score items, {len(merges)} merged choices"
          f"{f', {len(skipped)} refused and left out' if skipped else ''}")
    for s in skipped:
        print(f"  left out {s.id}: {s.reason}")
    print("| relation | n | mean gap | share with gap > 0.05 |")
    print("|---|---|---|---|")
    for name, gaps in (("choice options as yes/no: |Σ P(yes) − 1|", sums),
                       ("merged option: |P(A or B) − P(A) − P(B)|", merge_gaps)):
        g = np.array(gaps)
        print(f"| {name} | {len(g)} | {g.mean():.3f} | {np.mean(g > 0.05):.2f} |")
    print(f"| score thresholds: P(≥k+1) > P(≥k) | {pairs} pairs | mean PAV change {np.mean(pav):.3f} | "
          f"{violations / max(pairs, 1):.2f} of pairs |")


if __name__ == "__main__":
    main()
