"""`jevfleet decide`: the server's answer to a request file, without a server.

The same request path as the gateway (gateway/pipeline.py: body → validation → prompt → tokens →
answer) and the worker's own scheduler and engine, run in this process: no sockets, no
supervisord. Requests of a JSONL file are submitted ahead, so the scheduler batches them and
the state snapshots serve repeated states.
"""
from __future__ import annotations

import json
import os
import sys
import threading
import uuid
from concurrent.futures import Future
from pathlib import Path

from gateway import pipeline
from gateway.body import read_body
from gateway.errors import ApiError, error_json
from gateway.tokenizer import Tokenizer
from shared.config import Settings
from shared.messages import Error, Message, Result, Score
from shared.model_files import resolve_model
from shared.profiles import Profile, load_profile
from worker.engine import Engine
from worker.model_thread import ModelThread
from worker.process import build_engine
from worker.scheduler import Pending, Scheduler

Outcome = tuple[int, dict]  # (HTTP status the server would have sent, its JSON body)


def load_in_process(settings: Settings, profile: Profile | None = None) -> tuple[Profile, Tokenizer, Engine]:
    """The gateway's tokenizer and a worker's engine (preamble pinned) in this process, on all
    the cores it may use unless settings.threads says otherwise; for decide and `jevfleet eval`."""
    profile = profile or load_profile(settings.profile)
    path = resolve_model(profile, settings.cache_path, settings.model)
    tokenizer = Tokenizer(path, profile, threads=1)
    engine = build_engine(settings, profile, path, settings.threads or len(os.sched_getaffinity(0)))
    return profile, tokenizer, engine


class LocalDecider:
    """Tokenizer, engine and scheduler thread of one worker, answering request bodies."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._waiting: dict[str, tuple[Future[Outcome], pipeline.Prepared, pipeline.Tokens]] = {}
        self._lock = threading.Lock()
        # Loaded on the thread that will decode (worker/model_thread.py says why).
        self._thread = ModelThread(self._load, lambda scheduler: scheduler.run(self._on_result), daemon=True)
        self._thread.start()
        self.scheduler = self._thread.wait_loaded()

    def _load(self) -> Scheduler:
        self.profile, self.tokenizer, self.engine = load_in_process(self.settings)
        return Scheduler(self.engine, budget=self.settings.batch_tokens, max_requests=self.engine.max_batch_requests)

    def answer(self, raw: bytes) -> Future[Outcome]:
        """Validate and submit one request body; the future holds what the server would send."""
        future: Future[Outcome] = Future()
        try:
            body = read_body(raw, content_type="application/json", content_encoding=None,
                             limit=self.settings.max_body_bytes)
            prepared = pipeline.prepare(body, self.profile)
            tokens = pipeline.tokenize(prepared, self.tokenizer.encode_request, self.settings.ctx)
        except ApiError as err:
            future.set_result((err.status, json.loads(err.json())))
            return future
        score = Score(request_id=uuid.uuid4().hex, prefix=tokens.prefix, suffixes=tokens.suffixes,
                      yes_ids=self.tokenizer.yes_ids, no_ids=self.tokenizer.no_ids, deadline=float("inf"))
        with self._lock:
            self._waiting[score.request_id] = (future, prepared, tokens)
        self.scheduler.submit(Pending.from_score(score))
        return future

    def _on_result(self, msg: Message) -> None:
        with self._lock:
            future, prepared, tokens = self._waiting.pop(msg.request_id)
        if isinstance(msg, Result):
            body = pipeline.respond(self.profile, prepared, tokens, msg.margins).model_dump(mode="json")
            future.set_result((200, body))
        elif isinstance(msg, Error):
            future.set_result((500, {"detail": f"engine error: {msg.message}"}))

    def close(self) -> None:
        self.scheduler.stop()
        self._thread.join()


def decide_file(settings: Settings, request: Path, output: Path | None) -> int:
    """One request file: the answer on stdout (and in `output`), or the error body on stderr."""
    if output is not None and output.exists():
        print(f"decide: {output} exists; not overwriting it", file=sys.stderr)
        return 1
    try:
        raw = request.read_bytes()
    except OSError as exc:
        print(f"decide: cannot read {request}: {exc.strerror}", file=sys.stderr)
        return 1
    decider = LocalDecider(settings)
    try:
        status, body = decider.answer(raw).result()
    finally:
        decider.close()
    if status != 200:
        print(error_json(body), file=sys.stderr)  # the body the server would send
        return 1
    text = json.dumps(body, indent=2, ensure_ascii=False)
    if output is not None:
        try:
            with output.open("x", encoding="utf-8") as fh:  # "x": never overwrite, even in a race
                fh.write(text + "\n")
        except FileExistsError:
            print(f"decide: {output} exists; not overwriting it", file=sys.stderr)
            return 1
    print(text)
    return 0


def decide_jsonl(settings: Settings, requests: Path, output: Path) -> int:
    """Many requests, one per line; errors become {"error": body} lines; resumable."""
    from jevfleet.jsonl import run_jsonl

    decider = LocalDecider(settings)

    def answer(line: str) -> Future[dict]:
        wrapped: Future[dict] = Future()
        inner = decider.answer(line.encode("utf-8"))
        inner.add_done_callback(lambda f: wrapped.set_result(
            f.result()[1] if f.result()[0] == 200 else {"error": f.result()[1]}))
        return wrapped

    try:
        written, skipped = run_jsonl(requests, output, answer)
    finally:
        decider.close()
    print(f"decide: {written} answered, {skipped} already in {output}", file=sys.stderr)
    return 0
