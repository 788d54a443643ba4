"""The load-time sanity check of a derived profile (shared/derive.py): do its answers rank a small
built-in set of plain items better than chance, on this model?

A profile derived from a file is checked for everything the file itself can tell (template,
boundary, answer tokens); whether the model then answers is something only the model can show.
A file that fits the checks and still answers at chance would otherwise look like a working
fleet. It is a warning, not a refusal: a weak model is still a model the user chose, and eight
pairs are a smoke test, not a measurement (`jevfleet eval` is that).

Each pair is one question asked of two texts, one where the answer is yes and one where it is no,
worded as plainly as eval/plain.jsonl's straightforward items and unlike the prompt's examples.
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
]


def pair_auc(yes_margins: list[float], no_margins: list[float]) -> float:
    """The share of (yes, no) item pairs ranked the right way round, ties counting half."""
    right = sum((y > n) + 0.5 * (y == n) for y in yes_margins for n in no_margins)
    return right / (len(yes_margins) * len(no_margins))


def sanity_auc(engine: Engine, profile: Profile) -> float:
    """AUC of the yes−no margins over PAIRS, every item read in one warm batch (nothing kept)."""
    jobs = [make_job(engine, profile, text, [question]) for question, *texts in PAIRS for text in texts]
    engine.run(jobs, warm=True)
    margins = [job.margins[0] for job in jobs]
    return pair_auc(margins[0::2], margins[1::2])


def check_sanity(engine: Engine, profile: Profile) -> float:
    """Run the set; a warning that names the figure when it ranks no better than chance."""
    auc = sanity_auc(engine, profile)
    if not auc > 0.5:
        log.warning("sanity check: the profile derived from %s ranks %d built-in plain yes/no pairs at AUC %.2f, "
                    "no better than chance (0.5): its answers may be noise; measure with `jevfleet eval --model` "
                    "and consider a hand-written profile", profile.source, len(PAIRS), auc)
    return auc
