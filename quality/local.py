"""Asking the labeled set in-process, through client/local.py: the path `jevfleet decide` takes
(the gateway's request path, a worker's scheduler and engine with the profile's preamble pinned),
so these are exactly the server's answers — plus the raw yes−no margins that calibration needs
and, when the engine's readout captures them, the logit columns a learned head is fitted on.

Every item is submitted before the first answer is awaited: the scheduler batches them and the
state snapshots serve the items that share a state.
"""
from __future__ import annotations

from typing import Any, Callable

from client.local import LocalDecider
from quality.items import QUESTION_ID, Item, Skipped, outcome, refused
from quality.metrics import Outcome
from shared.config import Settings
from shared.profiles import Profile


class LocalRunner:
    """Answers items with a model loaded in this process."""

    def __init__(self, settings: Settings, profile: Profile | None = None, *, sanity: bool = True) -> None:
        self.decider = LocalDecider(settings, profile, sanity=sanity)
        self.profile, self.tokenizer, self.engine = self.decider.profile, self.decider.tokenizer, self.decider.engine
        self.features: dict[str, Any] = {}  # yes/no item id -> captured logits (engine.readout.capture)
        self.margins: dict[str, list[float]] = {}  # item id -> the raw margin of each of its jobs
        self.reference: dict[str, Any] = {}  # yes/no item id -> llama.cpp's logits there (Job.reference)

    def ask(self, items: list[Item], progress: Callable[[int], None] = lambda n: None) -> list[Outcome | Skipped]:
        """One Outcome (or Skipped) per item, in order; progress(1) after every item."""
        asked = [(item, self.decider.answer_body(item.request(self.profile.name))) for item in items]
        results: list[Outcome | Skipped] = []
        for item, future in asked:
            answer = future.result()
            progress(1)
            if answer.status != 200:
                results.append(refused(item, answer.status, answer.body))
                continue
            self.margins[item.id] = answer.margins
            margin = None
            if item.type == "noul":
                margin = answer.margins[0]
                if answer.features:
                    self.features[item.id] = answer.features[0]
                if answer.reference:
                    self.reference[item.id] = answer.reference[0]
            results.append(outcome(item, answer.body["answers"][QUESTION_ID], margin))
        return results

    def close(self) -> None:
        self.decider.close()
