"""Asking the labeled set in-process: the gateway's own request path (gateway/pipeline.py:
validation, prompt rendering, tokenizing, answer assembly) and the worker's engine
(jevfleet/decide.load_in_process, the profile's preamble pinned as a snapshot), without a server.

Items go to the engine in batches of as many requests as it takes at once; the pinned preamble
means each item reads only its state and question. Deterministic mode gives the same margins
on every path (docs/architecture.md), so these are exactly the server's answers — plus the raw
yes−no margins that calibration needs.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from gateway import pipeline
from gateway.errors import ApiError
from quality.items import QUESTION_ID, Item, Skipped, outcome
from quality.metrics import Outcome
from shared.config import Settings
from jevfleet.decide import load_in_process
from shared.profiles import Profile
from worker.engine import Job


@dataclass
class _Asked:
    item: Item
    prepared: pipeline.Prepared
    tokens: pipeline.Tokens


class LocalRunner:
    """Answers items with a model loaded in this process."""

    def __init__(self, settings: Settings, profile: Profile | None = None) -> None:
        self.settings = settings
        self.profile, self.tok, self.engine = load_in_process(settings, profile)

    def _prepare(self, item: Item) -> _Asked | Skipped:
        try:
            prepared = pipeline.prepare(item.request(self.profile.name), self.profile)
            tokens = pipeline.tokenize(prepared, self.tok.encode_request, self.settings.ctx)
        except ApiError as err:
            return Skipped(item.id, f"HTTP {err}")
        return _Asked(item, prepared, tokens)

    def ask(self, items: list[Item], progress: Callable[[int], None] = lambda n: None) -> list[Outcome | Skipped]:
        """One Outcome (or Skipped) per item, in order; progress(n) after every n items."""
        results: dict[str, Outcome | Skipped] = {}
        pending: list[_Asked] = []
        for item in items:
            prepared = self._prepare(item)
            if isinstance(prepared, Skipped):
                results[item.id] = prepared
                progress(1)
            else:
                pending.append(prepared)
        step = self.engine.max_batch_requests
        for start in range(0, len(pending), step):
            chunk = pending[start:start + step]
            jobs = [Job(prefix=a.tokens.prefix, suffixes=a.tokens.suffixes, yes_ids=self.tok.yes_ids,
                        no_ids=self.tok.no_ids) for a in chunk]
            self.engine.run(jobs)
            for a, job in zip(chunk, jobs):
                answer = pipeline.respond(self.profile, a.prepared, a.tokens, job.margins).answers[QUESTION_ID]
                margin = job.margins[0] if a.item.type == "noul" else None
                results[a.item.id] = outcome(a.item, answer.model_dump(), margin)
            progress(len(chunk))
        return [results[item.id] for item in items]

    def close(self) -> None:
        self.tok.close()
        self.engine.close()
