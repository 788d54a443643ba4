"""Compare prompt formats for a model profile on the FIT half of eval/yesno.jsonl (once each).

    python -m quality.prompt_variants [--profile gemma-3-270m] [--only base,evidence] [--limit N]

Every variant is the profile with a different preamble / prefix / suffix / answer tokens, on
a freshly loaded model (its preamble is pinned at load). Columns: accuracy, Brier and ECE of the raw P(yes) (scale 1, bias 0, as a
new profile answers before calibration), AUC (ranking quality, which calibration cannot change)
and the Brier after Platt scaling fitted on the same half (what calibration can reach).
The shots below were written for this comparison; none is an eval-set item.
"""
from __future__ import annotations

import argparse
import dataclasses
import time

import numpy as np

from quality.calibration import fit_platt, recalibrated
from quality.evaluate import ask_all
from quality.items import load_set
from quality.local import LocalRunner
from quality.metrics import auc, summarize
from shared.config import load_settings
from shared.derive import serving_profile
from shared.profiles import Profile

# (text, question, answer): one or two per kind of the eval set, answers in no fixed pattern.
SHOTS16 = [
    ("The customer says the blue kettle she received is missing its lid.", "Is a part of the kettle missing?", True),
    ("Invoice 5521 was paid by bank transfer on the 4th.", "Was invoice 5521 paid by credit card?", False),
    ("The technician did not replace the filter during the visit.", "Was the filter replaced?", False),
    ("Rule: orders above 100 euros ship for free. Order 88 totals 130 euros.", "Does order 88 ship for free?", True),
    ("The trial started on May 2 and lasts 14 days.", "Is the trial still running on May 10?", True),
    ("The disk alarm fires when usage passes 90%. Disk usage on db-3 is 72%.", "Should the disk alarm fire?", False),
    ("Could you send my order to my office address instead of my home?", "Does the customer want to change the delivery address?", True),
    ("Hello, my screen flickers whenever I open the camera app.", "Does the message mention the battery?", False),
    ("Rule: staff may expense taxis only after 10 pm. Ben took a taxi at 7 pm and asks to be paid back.", "May Ben expense this taxi?", False),
    ("Laptop A weighs 1.2 kg and laptop B weighs 1.8 kg.", "Is laptop B heavier than laptop A?", True),
    ("Priya signed the contract and Tom filed it.", "Did Tom sign the contract?", False),
    ("Sam bought 4 notebooks at 3 dollars each.", "Did the notebooks cost 12 dollars in total?", True),
    ("The app crashes every time I tap the settings button.", "Is this a technical problem?", True),
    ("Honestly the worst support I have ever had, nobody answers my emails.", "Is the writer satisfied?", False),
    ("Thanks, the replacement arrived today and works perfectly.", "Is the customer happy?", True),
    ("My refund for order 410 has still not arrived after three weeks.", "Is this about a delivery address?", False),
]
# Eight shots in the manner of plainly worded traffic (eval/plain.jsonl's tag): the text says the
# thing asked about, or names another thing of the same sort; written for this comparison, none is
# an eval item, and they differ from its templates in wording, names and things.
PLAIN8 = [
    ("Hello, the heater I bought in May gives off a burning smell when I switch it on.", "Is the message about a heater?", True),
    ("Mira wrote on Sunday evening to ask about her warranty.", "Did Mira write on Tuesday?", False),
    ("Please bring the two chairs to Jan Novak, 8 Mill Lane, Leeds.", "Is the delivery address in Leeds?", True),
    ("You are a useless fool, @pat21, just go away.", "Is this comment polite?", False),
    ("Dear team, I would like to end my gym membership from next month.", "Is the customer asking about a repair?", False),
    ("Next step of the agent: rename report.docx to report-final.docx.", "Will the agent rename a file?", True),
    ("Buongiorno, vorrei spostare la prenotazione a sabato.", "Is the message written in German?", False),
    ("I am thrilled, the new phone works great, thank you!", "Is the writer happy?", True),
]
HEADER = ("Each text below is followed by a question about it. The answer is Yes when the text shows that "
          "the answer to the question is yes, and No otherwise. Read names, numbers, dates and negations "
          "carefully.\n\n")
PLAIN = ("Text: {state}\n", "Question: {question}\nAnswer:")
EVIDENCE = ("<evidence>\n{state}\n</evidence>\n", "Question: {question}\nAnswer:")


def shots(fmt: tuple[str, str], examples: list[tuple[str, str, bool]]) -> str:
    prefix, suffix = fmt
    return "".join(prefix.format(state=s) + suffix.format(question=q) + (" Yes" if a else " No") + "\n\n"
                   for s, q, a in examples)


def plain_shots_of(profile: Profile) -> list[tuple[str, str, bool]]:
    """The profile's own few-shot examples (written in the plain Text/Question/Answer format)."""
    out = []
    for block in profile.preamble.strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line)
        if {"Text", "Question", "Answer"} <= set(lines):
            out.append((lines["Text"], lines["Question"], lines["Answer"].strip() == "Yes"))
    return out


def variants(base: Profile) -> dict[str, dict]:
    own = plain_shots_of(base) or SHOTS16[:8]
    return {
        "base": {},
        "evidence": dict(preamble=shots(EVIDENCE, own), prefix=EVIDENCE[0], suffix=EVIDENCE[1]),
        "instruct": dict(preamble=HEADER + shots(PLAIN, own)),
        "zero-shot": dict(preamble=HEADER),
        "16-shot": dict(preamble=shots(PLAIN, SHOTS16), prefix=PLAIN[0], suffix=PLAIN[1]),
        "16-shot+instruct": dict(preamble=HEADER + shots(PLAIN, SHOTS16), prefix=PLAIN[0], suffix=PLAIN[1]),
        "16-shot+evidence": dict(preamble=shots(EVIDENCE, SHOTS16), prefix=EVIDENCE[0], suffix=EVIDENCE[1]),
        "base Yes/No only": dict(yes=(" Yes",), no=(" No",)),
        "plain-8": dict(preamble=shots(PLAIN, PLAIN8), prefix=PLAIN[0], suffix=PLAIN[1]),
        "plain-8+base": dict(preamble=shots(PLAIN, _interleave(PLAIN8, own)), prefix=PLAIN[0], suffix=PLAIN[1]),
        "plain-8+instruct": dict(preamble=HEADER + shots(PLAIN, PLAIN8), prefix=PLAIN[0], suffix=PLAIN[1]),
    }


def _interleave(a: list, b: list) -> list:
    return [x for pair in zip(a, b) for x in pair]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default="")
    parser.add_argument("--only", default="", help="comma-separated variant names")
    parser.add_argument("--limit", type=int, default=0, help="first N fit items only (a quick check)")
    parser.add_argument("--set", dest="set_path", nargs="+", default=["eval/yesno.jsonl"])
    parser.add_argument("--tag", default="", help="only the fit items of this tag (straightforward, adversarial)")
    args = parser.parse_args()
    settings = load_settings({"profile": args.profile or None})
    base = serving_profile(settings)
    items = [i for i in load_set(args.set_path, "fit") if i.type == "noul" and (not args.tag or i.tag == args.tag)]
    items = items[: args.limit or None]
    chosen = variants(base)
    names = [n.strip() for n in args.only.split(",")] if args.only else list(chosen)
    unknown = [n for n in names if n not in chosen]
    if unknown:
        parser.error(f"unknown variant(s) {unknown}; known: {', '.join(chosen)}")
    print(f"fit split of {' + '.join(args.set_path)}{' tag ' + args.tag if args.tag else ''} ({len(items)} items), "
          f"profile {base.name}", flush=True)
    print("| variant | accuracy | Brier | ECE | AUC | Brier (Platt) | acc (Platt) | preamble tokens | s |")
    print("|---|---|---|---|---|---|---|---|---|", flush=True)
    for name in names:
        start = time.monotonic()
        runner = LocalRunner(settings, dataclasses.replace(base, scale=1.0, bias=0.0, **chosen[name]))
        outcomes, skipped = ask_all(runner, items, desc=name)
        preamble = len(runner.tokenizer.encode(runner.profile.preamble, bos=runner.profile.add_bos))
        runner.close()
        raw = summarize(name, outcomes)
        m = np.array([o.margin for o in outcomes])
        y = np.array([o.answer == 0 for o in outcomes])
        scale, bias = fit_platt(m, y)
        cal = summarize(name, recalibrated(runner.profile, outcomes, scale, bias))
        note = f" ({len(skipped)} skipped)" if skipped else ""
        print(f"| {name}{note} | {raw.accuracy:.3f} | {raw.brier:.3f} | {raw.ece:.3f} | {auc(m, y):.3f} | "
              f"{cal.brier:.3f} | {cal.accuracy:.3f} | {preamble} | {time.monotonic() - start:.0f} |",
              flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
