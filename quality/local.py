"""Asking the labeled set in-process: the worker's Engine and the gateway's own rendering,
tokenizer and answer assembly, without a server.

The preamble is the same for every item, so a chunk of items becomes ONE engine job: the
preamble is the job's prefix (read once) and each item's state + question is a suffix of it.
That reads what the server would read (tokens are checked to split the same way; an item
whose tokens would not is asked as a job of its own) and is several times faster than asking
item by item. Answers do not depend on this: deterministic mode gives the same margins on
every path (architecture.md).
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from pydantic import ValidationError

from gateway import answers
from gateway.prompts import Rendered, render
from gateway.tokenizer import Tokenizer
from gateway.wire import DecisionRequest
from quality.items import QUESTION_ID, Item, Skipped, outcome
from quality.metrics import Outcome
from shared.profiles import Profile
from worker.engine import Engine, Job

CHUNK = 90  # items per engine call: the preamble is read once per chunk


@dataclass
class _Asked:
    item: Item
    rendered: Rendered
    tokens: list[list[int]]  # one token list per job suffix, each continuing `prefix`
    prefix: list[int]
    shared: bool  # True: `prefix` is the preamble, shared with the other items of a chunk
    margins: list[float] = field(default_factory=list)


def default_threads() -> int:
    return len(os.sched_getaffinity(0))


class LocalRunner:
    """Answers items with a model loaded in this process."""

    def __init__(self, profile: Profile, model_path: Path, *, ctx: int = 8192, threads: int = 0,
                 deterministic: bool = True) -> None:
        self.model_path = model_path
        self.deterministic = deterministic
        self.engine = Engine(model_path, ctx=ctx, threads=threads or default_threads(), deterministic=deterministic)
        self.use_profile(profile)

    def use_profile(self, profile: Profile) -> None:
        """Ask with another profile of the same GGUF (prompt variants) without reloading weights."""
        self.profile = profile
        self.tok = Tokenizer(self.model_path, profile, threads=1, deterministic=self.deterministic)
        self.preamble = self.tok.encode(profile.preamble, bos=profile.add_bos)

    def _prepare(self, item: Item) -> _Asked | Skipped:
        try:
            req = DecisionRequest.model_validate(item.request(self.profile.name))
        except ValidationError as exc:
            first = exc.errors()[0]
            return Skipped(item.id, f"the gateway refuses it in-process ({first['type']}: {first['msg']}); "
                                    "ask a server that answers this type with --url")
        rendered = render(self.profile, req)
        prefix, suffixes = self.tok.encode_request(rendered.prefix, rendered.suffixes)
        state = self.tok.encode(rendered.prefix[len(self.profile.preamble):])
        if rendered.prefix.startswith(self.profile.preamble) and self.preamble + state == prefix:
            return _Asked(item, rendered, [state + s for s in suffixes], self.preamble, shared=True)
        return _Asked(item, rendered, suffixes, prefix, shared=False)

    def _run_chunk(self, asked: list[_Asked]) -> None:
        shared = [a for a in asked if a.shared]
        own = [a for a in asked if not a.shared]
        jobs = [Job(prefix=self.preamble, suffixes=[t for a in shared for t in a.tokens],
                    yes_ids=self.tok.yes_ids, no_ids=self.tok.no_ids)] if shared else []
        jobs += [Job(prefix=a.prefix, suffixes=a.tokens, yes_ids=self.tok.yes_ids, no_ids=self.tok.no_ids)
                 for a in own]
        self.engine.run(jobs)
        margins = iter(jobs[0].margins if shared else [])
        for a in shared:
            a.margins = [next(margins) for _ in a.tokens]
        for a, job in zip(own, jobs[1:] if shared else jobs):
            a.margins = job.margins

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
        for start in range(0, len(pending), CHUNK):
            chunk = pending[start:start + CHUNK]
            self._run_chunk(chunk)
            for a in chunk:
                wire = answers.assemble(self.profile, a.rendered, a.margins)[QUESTION_ID].model_dump()
                margin = a.margins[0] if a.item.type == "noul" else None
                results[a.item.id] = outcome(a.item, wire, margin)
            progress(len(chunk))
        return [results[item.id] for item in items]

    def close(self) -> None:
        self.tok.close()
