"""Answering requests in this process, the one way `jevfleet decide` and `jevfleet eval` /
`calibrate` (quality/local.py) both do it: the gateway's request path (gateway/pipeline.py: body →
validation → prompt → tokens → answer) in front of one worker's scheduler and engine on the
model thread; no sockets, no supervisord.

Requests submitted ahead are batched by the scheduler and served by the state snapshots as on a
worker, and deterministic mode gives the margins of every other path (docs/architecture.md), so
an answer here is the server's answer to the same request, byte for byte.
"""
from __future__ import annotations

import json
import os
import threading
import uuid
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from gateway import pipeline
from gateway.body import read_body
from gateway.errors import ApiError
from gateway.tokenizer import Tokenizer
from shared.config import Settings
from shared.messages import Error, Message, Result, Score
from shared.plan import serving_plan
from shared.profiles import Profile
from worker.engine import Engine
from worker.job import Job
from worker.model_thread import ModelThread
from worker.process import build_engine
from worker.scheduler import Pending, Scheduler


@dataclass(frozen=True)
class Answer:
    status: int  # the HTTP status the server would have sent
    body: dict[str, Any]  # its JSON body: the answer, or the error
    margins: list[float] = field(default_factory=list)  # raw yes−no margin of each yes/no job (none on error)
    features: dict[int, Any] = field(default_factory=dict)  # job -> captured logits (engine.readout.capture)
    reference: dict[int, Any] = field(default_factory=dict)  # job -> llama.cpp's logits there (Job.reference)
    result: Result | None = None  # the worker's message: its queue and run time, the requests in its batch


@dataclass
class _Waiting:
    future: Future[Answer]
    prepared: pipeline.Prepared
    tokens: pipeline.Tokens
    job: Job


class LocalDecider:
    """The gateway's tokenizer and request path and a worker's engine (preamble pinned) and
    scheduler, answering request bodies. The engine uses every core this process may use unless
    settings.threads says otherwise; `profile` replaces the one settings name (shared/plan.py)."""

    def __init__(self, settings: Settings, profile: Profile | None = None, *, sanity: bool = True) -> None:
        plan = serving_plan(settings, profile)
        self.profile, self.model, self.settings = plan.profile, plan.model, plan.settings
        self._sanity = sanity  # build_engine's: off for the calibration fit
        self._waiting: dict[str, _Waiting] = {}
        self._lock = threading.Lock()
        # Loaded on the thread that will decode (worker/model_thread.py says why).
        self._thread = ModelThread(self._load, lambda scheduler: scheduler.run(self._on_result), daemon=True)
        self._thread.start()
        self.scheduler = self._thread.wait_loaded()

    def _load(self) -> Scheduler:
        self.tokenizer = Tokenizer(self.model, self.profile, threads=1)
        self.engine: Engine = build_engine(self.settings, self.profile, self.model,
                                           self.settings.threads or len(os.sched_getaffinity(0)), sanity=self._sanity)
        return Scheduler.for_engine(self.engine, self.settings)

    def answer(self, raw: bytes) -> Future[Answer]:
        """Read one request body as the gateway reads JSON bytes, then answer_body()."""
        try:
            body = read_body(raw, content_type="application/json", content_encoding=None,
                             limit=self.settings.max_body_bytes)
        except ApiError as err:
            return _refused(err)
        return self.answer_body(body)

    def answer_body(self, body: object) -> Future[Answer]:
        """Validate and submit one parsed request body; the future holds what the server would send."""
        try:
            prepared, tokens = self.prepare(body)
        except ApiError as err:
            return _refused(err)
        return self.submit(prepared, tokens)

    def prepare(self, body: object) -> tuple[pipeline.Prepared, pipeline.Tokens]:
        """Validate, render and tokenize one request body as the gateway does (ApiError if refused)."""
        prepared = pipeline.prepare(body, self.profile)
        return prepared, pipeline.tokenize(prepared, self.tokenizer.encode_request, self.settings.ctx)

    def submit(self, prepared: pipeline.Prepared, tokens: pipeline.Tokens) -> Future[Answer]:
        """Queue a prepared request at the scheduler: what is left of the request path is the
        worker's (bench/floor.py times this part alone)."""
        score = Score(request_id=uuid.uuid4().hex, prefix=tokens.prefix, suffixes=tokens.suffixes,
                      yes_ids=self.tokenizer.yes_ids, no_ids=self.tokenizer.no_ids, deadline=float("inf"))
        pending = Pending.from_score(score)
        waiting = _Waiting(Future(), prepared, tokens, pending.job)
        with self._lock:
            self._waiting[score.request_id] = waiting
        self.scheduler.submit(pending)
        return waiting.future

    def _on_result(self, msg: Message) -> None:
        """On the model thread, right after the batch ran: the job's margins and features are final."""
        with self._lock:
            waiting = self._waiting.pop(msg.request_id)
        if isinstance(msg, Result):
            body = pipeline.respond(self.profile, waiting.prepared, waiting.tokens, msg.margins).model_dump(mode="json")
            waiting.future.set_result(Answer(200, body, list(msg.margins), dict(waiting.job.features),
                                             dict(waiting.job.reference), msg))
        elif isinstance(msg, Error):
            waiting.future.set_result(Answer(500, {"detail": f"engine error: {msg.message}"}))

    def close(self) -> None:
        """Stop the scheduler after its running batch and free the model."""
        self.scheduler.stop()
        self._thread.join()
        self.tokenizer.close()
        self.engine.close()


def _refused(err: ApiError) -> Future[Answer]:
    future: Future[Answer] = Future()
    future.set_result(Answer(err.status, json.loads(err.json())))
    return future
