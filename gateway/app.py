"""The aiohttp application: routes, error shapes, and the path of one decision request."""
from __future__ import annotations

import json
import logging
import time
import uuid
from pathlib import Path

from aiohttp import web
from pydantic import ValidationError

from gateway import answers
from gateway.errors import bad_request, json_error, overloaded, validation_error, value_error
from gateway.fleet import Fleet, NoWorker, WorkerFailed
from gateway.metrics import install as install_metrics, record_batch
from gateway.prompts import render
from gateway.timing import Timing
from gateway.tokenizer import Tokenizer
from gateway.wire import DecisionRequest, DecisionResponse, ModelCard, ModelList, Usage
from shared.config import Settings
from shared.messages import Score
from shared.model_files import file_sha256, resolve_model
from shared.profiles import Profile, load_profile

log = logging.getLogger("jevfleet.gateway")

SETTINGS = web.AppKey("settings", Settings)
PROFILE = web.AppKey("profile", Profile)
FLEET = web.AppKey("fleet", Fleet)
TOKENIZER = web.AppKey("tokenizer", Tokenizer)
MODEL_FILE = web.AppKey("model_file", Path)


@web.middleware
async def request_id_and_errors(request: web.Request, handler) -> web.StreamResponse:
    """Every response carries a request id, and every error body is JSON."""
    rid = request.headers.get("x-request-id") or uuid.uuid4().hex
    try:
        response = await handler(request)
    except web.HTTPMethodNotAllowed as exc:
        response = json_error(405, "Method Not Allowed", headers={"Allow": ",".join(sorted(exc.allowed_methods))})
    except web.HTTPNotFound:
        response = json_error(404, "Not Found")
    except web.HTTPException as exc:
        response = json_error(exc.status, exc.reason)
    except Exception:  # a bug: still a JSON body, and the trace goes to the log, not the client
        log.exception("unhandled error on %s %s", request.method, request.path)
        response = json_error(500, "Internal Server Error")
    response.headers["x-request-id"] = rid
    response.headers["x-typesafe-request-id"] = rid
    return response


async def systemone(request: web.Request) -> web.Response:
    app = request.app
    settings, profile = app[SETTINGS], app[PROFILE]
    timing = Timing()
    raw = await request.read()
    try:
        body = json.loads(raw.decode("utf-8-sig")) if raw else None
    except UnicodeDecodeError:
        return bad_request()
    except json.JSONDecodeError as exc:
        return validation_error([{"type": "json_invalid", "loc": ["body", exc.pos], "msg": "JSON decode error",
                                  "input": {}, "ctx": {"error": exc.msg}}])
    timing.lap("parse")
    try:
        req = DecisionRequest.model_validate(body)
    except ValidationError as exc:
        return validation_error(exc.errors(include_url=False), prefix=("body",))
    if req.model != profile.name and not req.model.startswith("jev-"):
        return value_error(["body", "model"], f"Unknown model {req.model!r}: this server answers as "
                                              f"'{profile.name}' and accepts any 'jev-*' alias")
    rendered = render(profile, req)
    timing.lap("validate")
    tok = app[TOKENIZER]
    prefix, suffixes = await tok.encode_async(rendered.prefix, rendered.suffixes)
    for (qid, start, end) in rendered.spans:
        longest = len(prefix) + max(len(s) for s in suffixes[start:end])
        if longest > settings.ctx:
            return value_error(["body"], f"Question {qid}: {longest} tokens exceeds the context limit "
                                         f"{settings.ctx} (--ctx); no truncation")
    timing.lap("tokenize")
    score = Score(request_id=uuid.uuid4().hex, prefix=prefix, suffixes=suffixes, yes_ids=tok.yes_ids,
                  no_ids=tok.no_ids, deadline=time.time() + settings.deadline_s)
    tokens = len(prefix) + sum(len(s) for s in suffixes)
    try:
        result = await app[FLEET].submit(score, tokens)
    except NoWorker as exc:
        return overloaded(503, str(exc), retry_after=1)
    except WorkerFailed as exc:
        if exc.code == "expired":
            return overloaded(503, "the request waited past its deadline", retry_after=1)
        raise
    record_batch(request, result.batch_requests)
    timing.set("queue", result.queue_ms)
    timing.set("inference", result.run_ms)
    timing.lap("wait")  # queue + inference as the worker measured them, set above
    response = DecisionResponse(model=profile.name, answers=answers.assemble(profile, rendered, result.margins),
                                usage=Usage(input_tokens=tokens, output_tokens=0))
    out = web.json_response(text=response.model_dump_json())
    timing.lap("respond")
    out.headers["Server-Timing"] = timing.header()
    return out


async def models(request: web.Request) -> web.Response:
    p = request.app[PROFILE]
    cards = [ModelCard(name=p.name, description=p.description, release_date=p.release_date),
             ModelCard(name="jev-latest", description=f"alias of {p.name}", release_date=p.release_date)]
    return web.json_response(text=ModelList(models=cards).model_dump_json())


async def health(request: web.Request) -> web.Response:
    app = request.app
    fleet, settings = app[FLEET], app[SETTINGS]
    workers = list(fleet.workers.values())
    up = [w for w in workers if w.up]
    status = "ready" if len(up) >= settings.worker_count else "degraded" if up else "starting"
    engine = {"batched_requests": sum(int(w.stats.get("batched_requests", 0)) for w in up)}
    path = app[MODEL_FILE]
    fingerprints = sorted({w.fingerprint for w in up})
    body = {
        "status": status,
        "model": app[PROFILE].name,
        "workers": [w.describe() for w in workers],
        "engine": engine,
        "model_files": {path.name: file_sha256(path)},
        "fingerprint": fingerprints[0] if len(fingerprints) == 1 else fingerprints,
    }
    return web.json_response(body, status=200 if up else 503)


def create_app(settings: Settings) -> web.Application:
    app = web.Application(middlewares=[request_id_and_errors], client_max_size=settings.max_body_bytes)
    profile = load_profile(settings.profile)
    app[SETTINGS] = settings
    app[PROFILE] = profile
    app[MODEL_FILE] = resolve_model(profile, settings.cache_path, settings.model)
    app[TOKENIZER] = Tokenizer(app[MODEL_FILE], profile, threads=settings.tokenizer_threads,
                               deterministic=settings.mode == "deterministic")
    app[FLEET] = Fleet(settings.zmq_endpoint, heartbeat_s=settings.heartbeat_s, dead_after_s=settings.dead_after_s)

    async def fleet_ctx(app: web.Application):
        settings.run_path.mkdir(parents=True, exist_ok=True)
        await app[FLEET].start()
        yield
        await app[FLEET].stop()
        app[TOKENIZER].close()

    app.cleanup_ctx.append(fleet_ctx)
    install_metrics(app, app[FLEET])
    app.router.add_post("/v1/systemone", systemone)
    app.router.add_get("/v1/models", models)
    app.router.add_get("/health", health)
    return app


def run_gateway_process(settings: Settings) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    web.run_app(create_app(settings), host=settings.host, port=settings.port, access_log=None,
                shutdown_timeout=settings.deadline_s, print=lambda *_: log.info(
                    "gateway on http://%s:%d", settings.host, settings.port))
    return 0
