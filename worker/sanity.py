"""The load-time sanity check of a derived profile (shared/derive.py): does it answer a small
built-in set of plain pairs better than chance, on this model?

A profile derived from a file is checked for everything the file itself can tell (template,
boundary, answer tokens); whether the model then answers is something only the model can show.
A file that fits the checks and still answers at chance would otherwise look like a working
fleet. It is a warning, not a refusal: a weak model is still a model the user chose, and twelve
pairs are a smoke test, not a measurement (`jevfleet eval` is that). It runs only where a derived
profile is served uncalibrated (worker/process.py's build_engine): a calibration fit asks hundreds
of items and keeps a two-fold Brier skill, the larger check of the same thing.

Each pair is one question asked of two texts, one where the answer is yes and one where it is no,
worded as plainly as eval/plain.jsonl's straightforward items and unlike the prompt's examples.
The figure is the share of pairs whose yes text gets the larger margin, not an AUC over all
items: small models move a margin with the question's words far more than with the text's
(docs/quality.md), and across different questions that wording bias would be all an AUC of
twelve pairs measured (Gemma 3 270M, whose plain-item AUC is 0.557, ranked an earlier set of
eight pairs at 0.38 that way).
"""
from __future__ import annotations

import logging

from shared.profiles import Profile
from worker.engine import Engine
from worker.warmup import make_job

log = logging.getLogger("jevfleet.worker")
# (question, a text where the answer is yes, a text where it is no)
PAIRS = [
    ("Is the customer asking for a refund?", "I want my money back for the broken chair.",
     "Thanks, the chair arrived in perfect condition."),
    ("Is the text about a delivery?", "The courier left the package at my door this morning.",
     "My password reset link does not work."),
    ("Is the writer angry?", "This is the third time you ruined my order. I am furious!",
     "Everything went smoothly, thank you so much!"),
    ("Is the text written in French?", "Bonjour, je voudrais changer mon adresse.",
     "Hello, I would like to change my address."),
    ("Does the message give a phone number?", "Call me back on 0612 345 678, please.",
     "Please answer by email, I do not have a phone."),
    ("Is the meeting on Friday?", "The team meeting is on Friday at ten.", "The team meeting is on Tuesday at ten."),
    ("Is the order going to Berlin?", "Ship order 4411 to our office in Berlin.",
     "Ship order 4411 to our office in Madrid."),
    ("Is the user reporting a bug?", "The app crashes every time I tap the save button.",
     "Could you add a dark mode to the app some day?"),
    ("Does the customer want to cancel?", "Please cancel my subscription today.",
     "Please renew my subscription for another year."),
    ("Is the text about the weather?", "Heavy rain and strong wind are expected tonight.",
     "The quarterly report is due next Monday."),
    ("Was the payment successful?", "Your payment of 40 euros went through.",
     "Your payment of 40 euros was declined by the bank."),
    ("Is the writer thanking someone?", "Thank you so much for fixing my laptop!",
     "My laptop still does not start after the repair."),
]


def share_right(yes_margins: list[float], no_margins: list[float]) -> float:
    """The share of pairs whose yes text gets the larger margin, ties counting half: each question
    against itself, so a question's wording, which moves both of its margins alike, drops out."""
    right = sum((y > n) + 0.5 * (y == n) for y, n in zip(yes_margins, no_margins, strict=True))
    return right / len(yes_margins)


def sanity_share(engine: Engine, profile: Profile) -> float:
    """share_right over PAIRS, each pair read in one warm batch (nothing kept; a batch of all of
    them would be more than a worker's batch budget lets a small context hold)."""
    margins = []
    for question, *texts in PAIRS:
        jobs = [make_job(engine, profile, text, [question]) for text in texts]
        engine.run(jobs, warm=True)
        margins += [job.margins[0] for job in jobs]
    return share_right(margins[0::2], margins[1::2])


def check_sanity(engine: Engine, profile: Profile) -> float:
    """Run the set; a warning that names the figure when it does no better than chance."""
    share = sanity_share(engine, profile)
    if not share > 0.5:
        log.warning("sanity check: the profile derived from %s answers %.0f of %d built-in plain yes/no pairs the "
                    "right way round (%.2f), no better than chance (0.5): its answers may be noise; measure with "
                    "`jevfleet eval --model` and consider a hand-written profile",
                    profile.source, share * len(PAIRS), len(PAIRS), share)
    return share
