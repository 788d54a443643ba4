"""The aiohttp application: routes, error shapes, and the path of one decision request."""
from __future__ import annotations

import logging
import os
import time
from functools import partial
from pathlib import Path

import msgspec
from aiohttp import hdrs, web
from aiohttp.http_exceptions import HttpProcessingError

from gateway import pipeline
from gateway.auth import OPEN_PATHS, authorized
from gateway.body import read_body
from gateway.capacity import Unavailable
from gateway.errors import ApiError, detail, internal_error, method_not_allowed, not_found, overloaded, unauthorized
from gateway.fleet import Fleet
from gateway.metrics import install as install_metrics, record_batch
from gateway.reading import BodyBudget, client_max_size, read_within, server_options
from gateway.request_ids import request_id, unique
from gateway.shedding import BODY_BUDGET, DOOR, Door, queued, received, refuse_if_full, shed_when_full
from gateway.timing import Timing
from gateway.tokenizer import Tokenizer
from gateway.wire import ModelCard, ModelList
from shared.config import Settings
from shared.llama import tokenize
from shared.messages import Score, SnapshotStats
from shared.model_files import file_sha256
from shared.plan import serving_plan
from shared.profiles import Profile
from shared.refusal import refuse
from shared.serving import fingerprint, serving_facts
from shared.start_guard import StartGuard

log = logging.getLogger("jevfleet.gateway")

SETTINGS = web.AppKey("settings", Settings)
PROFILE = web.AppKey("profile", Profile)
FLEET = web.AppKey("fleet", Fleet)
TOKENIZER = web.AppKey("tokenizer", Tokenizer)
MODEL_FILE = web.AppKey("model_file", Path)
API_KEY = web.AppKey("api_key", str)  # "" = no authentication
TIMING = "timing"  # request key: the request's Timing, started before its body is read
REQUEST_ID = "request_id"  # request key: gateway/request_ids.py

LISTEN_BACKLOG = 4096  # connections the kernel holds before accept (capped by net.core.somaxconn)


class ClientHttpErrors(logging.Filter):
    """aiohttp answers bytes its HTTP parser refuses (a body longer than its Content-Length, a
    bad request line) with its own 400, before the app sees a request, and logs the parser's
    traceback at ERROR. That is the client's mistake, not a fault here: one line at INFO."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, HttpProcessingError):
            first = next((line.strip() for line in exc.message.splitlines() if line.strip()), "")
            record.msg, record.args = "%s; answered %d: %s: %s", (record.getMessage(), exc.code,
                                                                 type(exc).__name__, first)
            record.exc_info = record.exc_text = None
            record.levelno, record.levelname = logging.INFO, "INFO"
        return True


CLIENT_HTTP_ERRORS = ClientHttpErrors()


def error_response(err: ApiError) -> web.Response:
    response = web.Response(body=err.json().encode("utf-8"), status=err.status, headers=err.headers,
                            content_type="application/json")
    if err.headers.get(hdrs.CONNECTION) == "close":  # said, so done: aiohttp then closes it after the answer
        response.force_close()
    return response


def _check_api_key(request: web.Request) -> None:
    key = request.app[API_KEY]
    if key and request.match_info.http_exception is None and request.path not in OPEN_PATHS:
        if not authorized(request.headers.get(hdrs.AUTHORIZATION), key):
            raise unauthorized()


@web.middleware
async def request_id_and_errors(request: web.Request, handler) -> web.StreamResponse:
    """Every response carries a request id (the client's, if it sent one), every error body is
    JSON, every POST answer has Server-Timing, and the API key is checked before anything else."""
    rid = request[REQUEST_ID] = request_id(request.headers)
    timing = request[TIMING] = Timing()
    try:
        _check_api_key(request)
        response = await handler(request)
    except ApiError as err:
        response = error_response(err)
    except Unavailable as exc:  # the one place a refusal becomes HTTP: 429, or 503 (gateway/capacity.py)
        if exc.status != 429:  # a 429 is cheap and may come by the thousand: not logged
            log.info("request %s: %d, %s", rid, exc.status, exc)
        response = error_response(overloaded(exc.status, str(exc), retry_after=exc.retry_after))
    except web.HTTPMethodNotAllowed as exc:
        response = error_response(method_not_allowed(exc.allowed_methods))
    except web.HTTPNotFound:
        response = error_response(not_found())
    except web.HTTPException as exc:
        response = error_response(detail(exc.status, exc.reason))
    except Exception:  # a bug: still a JSON body, and the trace goes to the log, not the client
        log.exception("request %s: unhandled error on %s %s", rid, request.method, request.path)
        response = error_response(internal_error())
    if request.method == "POST":
        response.headers["Server-Timing"] = timing.header()
    response.headers["x-request-id"] = rid
    response.headers["x-typesafe-request-id"] = rid
    return response


async def systemone(request: web.Request) -> web.Response:
    app = request.app
    settings, profile, tok = app[SETTINGS], app[PROFILE], app[TOKENIZER]
    timing: Timing = request[TIMING]
    with timing.phase("parse"):
        raw = await read_within(request, limit=settings.max_body_bytes, timeout_s=settings.body_timeout_s)
        received(request)  # a place taken only now: one still sending its body kept nobody out
        body = read_body(raw, content_type=request.headers.get(hdrs.CONTENT_TYPE),
                         content_encoding=request.headers.get(hdrs.CONTENT_ENCODING), limit=settings.max_body_bytes)
    with timing.phase("validate"):
        prepared = pipeline.prepare(body, profile)
    refuse_if_full(app[FLEET])  # not worth a place in the tokenizer's queue
    with timing.phase("tokenize"):
        ids = await tok.encode_async(prepared.rendered.prefix, prepared.rendered.suffixes)
        tokens = pipeline.check_tokens(prepared, *ids, settings.ctx)
    fleet = app[FLEET]
    rid = unique(request[REQUEST_ID], fleet.inflight_ids)
    score = Score(request_id=rid, prefix=tokens.prefix, suffixes=tokens.suffixes, yes_ids=tok.yes_ids,
                  no_ids=tok.no_ids, deadline=time.time() + settings.deadline_s)
    queued(request)  # from here on its place is counted in the worker's queue
    result = await fleet.submit(score)  # or an Unavailable, answered by the error middleware
    timing.answered(result.queue_ms, result.run_ms)
    record_batch(request, result.batch_requests)
    log.info("request %s: answered, %d tokens, queue %.0f ms, run %.0f ms, outside %.0f ms", rid, tokens.count,
             result.queue_ms, result.run_ms, timing.ms["outside"])
    answer = pipeline.respond(profile, prepared, tokens, result.margins)
    out = web.Response(body=answer.model_dump_json().encode("utf-8"), content_type="application/json")
    timing.lap("respond")
    return out


async def models(request: web.Request) -> web.Response:
    p = request.app[PROFILE]
    cards = [ModelCard(name=p.name, description=p.description, release_date=p.release_date),
             ModelCard(name="jev-latest", description=f"alias of {p.name}", release_date=p.release_date)]
    return web.json_response(text=ModelList(models=cards).model_dump_json())


async def health(request: web.Request) -> web.Response:
    app = request.app
    fleet, settings = app[FLEET], app[SETTINGS]
    queues = list(fleet.queues.values())
    up = [q.worker for q in queues if q.worker.up]
    status = "ready" if len(up) >= settings.worker_count else "degraded" if up else "starting"
    snapshots = {w.worker_id: w.stats.state_snapshots for w in up}
    engine = {
        "batched_requests": sum(w.stats.batched_requests for w in up),
        # counters summed over live workers, and each worker's own under "workers"
        "state_snapshots": {**{name: sum(getattr(s, name) for s in snapshots.values())
                               for name in SnapshotStats.__struct_fields__},
                            "workers": msgspec.to_builtins(snapshots)},
    }
    files = [app[MODEL_FILE]] + ([Path(app[PROFILE].head)] if app[PROFILE].head else [])  # GGUF (+ learned head)
    serves = fleet.admission.expected  # every member serves exactly this (gateway/admission.py)
    body = {
        "status": status,
        "model": app[PROFILE].name,
        "workers": [q.describe() for q in queues],
        "engine": engine,
        "model_files": {path.name: file_sha256(path) for path in files},
        "fingerprint": fingerprint(serves) if serves else None,
        "fleet": fleet.describe(),
        "door": app[DOOR].describe(),
        "refused_workers": fleet.admission.describe(forget_after_s=settings.dead_after_s),
    }
    # ?ready: 200 only once every worker is up (a Kubernetes readiness probe: a unit takes traffic
    # when whole); without it, 200 while any worker is up (HAProxy's check, a liveness probe).
    serving = status == "ready" if "ready" in request.query else bool(up)
    return web.json_response(body, status=200 if serving else 503)


def create_app(settings: Settings, *, profile: Profile, model_file: Path, tokenizer: Tokenizer, fleet: Fleet,
               api_key: str = "") -> web.Application:
    """The routes over parts the caller built: build_app passes the real ones; tests pass a small
    tokenizer and a fleet of scripted workers, so the HTTP contract is tested without the model.
    api_key: when not empty, the Bearer token every call but /health and /metrics needs."""
    app = web.Application(middlewares=[request_id_and_errors, shed_when_full("/v1/systemone")],
                          client_max_size=client_max_size(settings))
    app[SETTINGS] = settings
    app[API_KEY] = api_key
    app[PROFILE] = profile
    app[MODEL_FILE] = model_file
    app[TOKENIZER] = tokenizer
    app[FLEET] = fleet
    app[DOOR] = Door(fleet)
    app[BODY_BUDGET] = BodyBudget(settings.body_bytes_in_flight, client_max_size(settings))

    async def fleet_ctx(app: web.Application):
        settings.run_path.mkdir(parents=True, exist_ok=True)
        await app[FLEET].start()
        yield
        await app[FLEET].stop()
        app[TOKENIZER].close()

    app.cleanup_ctx.append(fleet_ctx)
    logging.getLogger("aiohttp.server").addFilter(CLIENT_HTTP_ERRORS)  # once: the same filter object
    install_metrics(app, app[FLEET])
    app.router.add_post("/v1/systemone", systemone)
    app.router.add_get("/v1/models", models)
    app.router.add_get("/health", health)
    return app


def build_app(settings: Settings, *, api_key: str = "") -> web.Application:
    """The gateway's app: the profile's GGUF read vocab-only to tokenize, and the fleet's ROUTER."""
    plan = serving_plan(settings)
    settings, profile, model_file = plan.settings, plan.profile, plan.model
    if profile.derived and not profile.calibration_record:
        log.warning("the profile derived from %s is served uncalibrated: no calibration is recorded in %s "
                    "(`jevfleet serve` fits one; derived_calibration)", profile.source, settings.cache_path)
    tokenizer = Tokenizer(model_file, profile, threads=settings.tokenizer_threads)
    fleet = Fleet(settings, preamble_tokens=tokenizer.preamble_tokens,
                  serves=serving_facts(profile=profile, model_sha256=plan.model_sha256(), mode=settings.mode,
                                       tokenize=partial(tokenize, tokenizer.vocab)))
    return create_app(settings, profile=profile, model_file=model_file, tokenizer=tokenizer, fleet=fleet,
                      api_key=api_key)


def run_gateway_process(settings: Settings) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    guard = StartGuard(settings.run_path, "gateway")  # a crash before it listens: back-off (shared/start_guard.py)
    try:  # a failure before the gateway listens exits 2 and is not restarted (shared/refusal.py)
        if wait := guard.begin():
            log.warning("the gateway's last start crashed before it listened; waiting %.0f s", wait)
            time.sleep(wait)
        app = build_app(settings, api_key=os.environ.get("JEV_API_KEY", ""))
    except Exception as exc:
        guard.done()
        log.exception("the gateway could not start")
        return refuse("gateway", exc)

    def listening(*_: object) -> None:
        guard.done()
        log.info("gateway on http://%s:%d", settings.host, settings.port)

    # handler_cancellation: a client that disconnects cancels its handler, which withdraws
    # its queued work from the worker. SIGTERM: stop accepting, let handlers finish, exit 0.
    # backlog: aiohttp's default of 128 pending connections made a burst of 400 lose SYNs, and
    # the kernel resends a SYN only after 1 s: a 429 decided in 0.1 ms reached the client at 1.05 s.
    try:
        web.run_app(app, host=settings.host, port=settings.port, access_log=None,
                    shutdown_timeout=settings.deadline_s,
                    print=listening,
                    handler_cancellation=True, backlog=LISTEN_BACKLOG, **server_options(settings))
    except OSError as exc:  # raised only while binding its addresses (the HTTP port, the workers' endpoint:
        # gateway/link.BindError), in use or not this host's: before it is up
        log.exception("the gateway could not listen on %s:%d and %s", settings.host, settings.port,
                      settings.zmq_endpoint)
        guard.done()
        return refuse("gateway", exc)
    return 0
