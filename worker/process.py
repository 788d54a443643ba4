"""The worker process: load the model, warm it, then move messages between the gateway's ROUTER
and the scheduler.

The model thread (worker/model_thread.py) loads, warms and then runs the scheduler: one thread
makes every llama.cpp call. The main thread owns the DEALER socket (ZeroMQ sockets are not
thread-safe); the model thread sends its results over an inproc PUSH socket that the main
thread forwards. SIGTERM
drains: queued requests are handed back to the gateway (DRAIN), the running batch finishes
while heartbeats say "draining", requests arriving meanwhile are refused with code
"draining" (the gateway places them again), and the process exits 0. Any crash exits
non-zero, so supervisord (autorestart=unexpected) starts it again; a failure before the worker
sent Ready (the model cannot be loaded, the start-up canary refuses, a setting it cannot honour),
or one the gateway refused (Refuse: its id is a live worker's), exits 2 with its reason in one line,
and is not started again (shared/refusal.py).
"""
from __future__ import annotations

import logging
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any, Callable

import msgspec
import zmq

from shared import curve
from shared.config import Settings
from shared.messages import (Cancel, CannotStart, Drain, Error, ErrorCode, Heartbeat, Message, Ping, Ready, Refuse,
                             Score, WorkerStats, decode, encode, routing_identity)
from shared.llama import build_description
from shared.model_files import file_sha256
from shared.plan import serving_plan
from shared.profiles import Profile, preamble_tokens
from shared.refusal import REFUSED, reason, refuse
from shared.serving import serving_facts, with_arithmetic
from shared.start_guard import StartGuard
from worker.canary import check_exact, run_canary, shape_record
from worker.cores import choose_cores, pin
from worker.engine import Engine
from worker.head import load_head
from worker.model_thread import ModelThread
from worker.outbox import Outbox
from worker.sanity import check_sanity
from worker.scheduler import Pending, Scheduler
from worker.warmup import startup_warmup

log = logging.getLogger("jevfleet.worker")
RESULTS = "inproc://results"
EXIT_FLUSH_S = 2.0  # at exit, how long held answers wait for a gateway that is not reading
CANNOT_START_LINGER_MS = 1000  # how long a worker that cannot start tries to tell the gateway why


def build_engine(settings: Settings, profile: Profile, model_path: Path, threads: int, *,
                 pin_preamble: bool = True, snapshot_tokens: int | None = None, sanity: bool = True) -> Engine:
    """The engine as settings describe it, with the profile's preamble pinned in the snapshot
    cache (every prompt starts with it). Shared with the offline `decide` command and the
    harness; pin_preamble=False (benchmarks only) leaves the preamble unread, snapshot_tokens
    (tests and benchmarks) sets the snapshots' cells in tokens instead of state_cache_mb.
    A derived profile's sanity check (a warning, never a refusal) runs only where nothing larger
    has asked the model: not on a calibrated one (its fit asked hundreds of such items and
    recorded a two-fold Brier skill), and not in the fit itself (sanity=False)."""
    engine = Engine.from_settings(model_path, settings, threads=threads,
                                  head=load_head(Path(profile.head)) if profile.head else None,
                                  snapshot_tokens=snapshot_tokens)
    if pin_preamble:
        engine.pin(preamble_tokens(engine.tokenize, profile))
    sha = file_sha256(model_path)
    record = shape_record(settings.cache_path, sha) if engine.deterministic else None
    report = run_canary(engine, profile, record)  # CanaryError: this engine must not answer (worker/canary.py)
    engine.arithmetic = report.arithmetic
    log.info("start-up canary passed in %.0f ms: output matrix %s, answer logits within %.1e of llama.cpp's own "
             "(of its largest logit), %s", report.seconds * 1000, report.output_type, report.max_logit_gap,
             f"bit-identical alone and among batch mates ({report.layouts_measured or 'no'} layouts measured now)"
             if engine.deterministic else "fast mode: not bit-checked")
    exact = check_exact(engine, profile, cache_dir=settings.cache_path, model_sha256=sha)
    log.info("start-up canary: served margins within %.1f %% of the margins' scale of llama.cpp's exact reading "
             "(%s)", 100 * exact.share, "measured now" if exact.measured else "as measured at an earlier start")
    if sanity and profile.derived and not profile.calibration_record:  # does the model answer? (a warning if not)
        log.info("sanity check of the derived profile: %.2f of its pairs the right way round",
                 check_sanity(engine, profile))
    return engine


class WorkerProcess:
    def __init__(self, settings: Settings, *, index: int, cores: str = "", worker_id: str = "") -> None:
        self.keys = curve.worker_keys(settings)  # refuse an unprotected remote link before loading
        placed = choose_cores(index, per_worker=settings.cores_per_worker, pin_workers=bool(settings.pin_workers),
                              threads=settings.threads, explicit=cores)
        if placed.pinned:
            pin(placed.cores)
        self.cores, self.pinned, self.threads = placed.cores, placed.pinned, placed.threads
        self.worker_id = worker_id or f"{os.uname().nodename}/w{index:02d}"
        self.identity = routing_identity(self.worker_id, os.getpid())
        self.refused_by_gateway = ""  # a Refuse's reason: this process exits 2 with it
        plan = serving_plan(settings)  # after the cheap refusals above: it reads the file's header
        self.settings, self.profile, self.model_path = plan.settings, plan.profile, plan.model
        self.model_sha256 = plan.model_sha256()
        self.engine: Engine | None = None  # built by the model thread
        self.scheduler: Scheduler | None = None
        self.serves: dict[str, str] = {}  # shared/serving.py, computed by the model thread
        self._stop = threading.Event()
        self._handlers: dict[type[Message], Callable[[Any], Message | None]] = {
            Score: self._on_score, Cancel: self._on_cancel, Ping: lambda _: None, Refuse: self._on_refuse}

    def status(self, kind: type[Ready] = Heartbeat) -> Ready:
        """On the main thread: what the model thread last published (Engine.status, replaced
        whole after each batch) and the scheduler's figures (read under its lock); it calls
        nothing in the engine, which only the model thread may."""
        counters, tokens, requests = self.scheduler.figures()
        engine = self.engine.status
        return kind(
            worker_id=self.worker_id,
            pid=os.getpid(),
            cores=self.cores,
            serves=self.serves,
            snapshot_keys=engine.snapshot_keys,
            stats=WorkerStats(**msgspec.structs.asdict(counters), queued_tokens=tokens, queued_requests=requests,
                              state_snapshots=engine.state_snapshots),
            draining=self._stop.is_set(),
            pinned=self.pinned,
        )

    def _load(self) -> Scheduler:
        """On the model thread: load, pin the preamble, warm up."""
        log.info("%s: loading %s %s cores %s (%d threads)", self.worker_id, self.model_path,
                 "pinned to" if self.pinned else "not pinned, on", self.cores, self.threads)
        self.engine = build_engine(self.settings, self.profile, self.model_path, self.threads)
        self.serves = with_arithmetic(
            serving_facts(profile=self.profile, model_sha256=self.model_sha256, mode=self.settings.mode,
                          tokenize=self.engine.tokenize),
            arithmetic=self.engine.arithmetic, llama_build=build_description())
        log.info("%s: arithmetic %s (%s)", self.worker_id, self.engine.arithmetic, self.serves["llama_build"])
        if self.settings.warmup:
            startup_warmup(self.engine, self.profile)
        self.scheduler = Scheduler.for_engine(self.engine, self.settings)
        return self.scheduler

    def _serve_model(self, zctx: zmq.Context) -> None:
        """On the model thread, once loaded: run the scheduler until stopped."""
        push = zctx.socket(zmq.PUSH)
        push.connect(RESULTS)
        try:
            self.scheduler.run(lambda msg: push.send(encode(msg)))
        finally:
            push.close(linger=1000)

    def _on_score(self, msg: Score) -> Message | None:
        if self._stop.is_set():
            return Error(request_id=msg.request_id, code=ErrorCode.DRAINING, message="worker is stopping")
        self.scheduler.submit(Pending.from_score(msg))
        return None

    def _on_cancel(self, msg: Cancel) -> Message | None:
        if self.scheduler.cancel(msg.request_id):
            return Error(request_id=msg.request_id, code=ErrorCode.CANCELLED, message="dropped before it ran")
        return None  # running or answered already: its answer comes, or came, as usual

    def _on_refuse(self, msg: Refuse) -> None:
        """The gateway will not admit this process (its id is a live worker's): serve ends."""
        self.refused_by_gateway = msg.reason

    def _on_message(self, msg: Message) -> Message | None:
        """Act on a gateway message by its type; returns the reply to send, if any. A Ping needs
        none: the gateway only learns whether the send reached us."""
        handler = self._handlers.get(type(msg))
        if handler is None:
            log.warning("%s: ignored a %s, which only a worker sends", self.worker_id, type(msg).__name__)
            return None
        return handler(msg)

    def _gateway_lost(self) -> None:
        """The connection to the gateway dropped: it died (its successor knows nothing of what
        it sent) or it saw the drop too and sent our requests elsewhere. Either way nobody
        waits for the queued ones: drop them, so a restarted gateway's requests do not queue
        behind orphans. The running batch finishes; its results are ignored if unwanted."""
        dropped = self.scheduler.clear()
        log.warning("%s: gateway connection lost; dropped %d queued requests", self.worker_id, len(dropped))

    def _dealer(self, zctx: zmq.Context, linger_ms: int) -> zmq.Socket:
        """The socket to the gateway, not yet connected: this worker's identity, its CURVE keys."""
        dealer = zctx.socket(zmq.DEALER)
        dealer.setsockopt(zmq.IDENTITY, self.identity)
        dealer.setsockopt(zmq.LINGER, linger_ms)
        if self.keys is not None:
            self.keys.apply(dealer)
        return dealer

    def _cannot_start(self, zctx: zmq.Context, why: str) -> None:
        """Tell the gateway, instead of Ready, why this worker will not serve (for its /health);
        a gateway that is not there does not hear it, and serve's exit says it anyway."""
        dealer = self._dealer(zctx, CANNOT_START_LINGER_MS)
        dealer.connect(self.settings.zmq_endpoint)
        dealer.send(encode(CannotStart(worker_id=self.worker_id, pid=os.getpid(), reason=why)))
        dealer.close()

    def serve(self, on_up: Callable[[], None] = lambda: None) -> int:
        """Load, connect, say Ready (then on_up()), and serve until drained (0), crashed (1) or refused (2)."""
        zctx = zmq.Context()
        pull = zctx.socket(zmq.PULL)
        pull.bind(RESULTS)
        thread = ModelThread(self._load, lambda _: self._serve_model(zctx), name="model")
        thread.start()
        try:
            thread.wait_loaded()
        except RuntimeError as exc:
            cause = exc.__cause__ or exc
            log.error("%s: could not start", self.worker_id, exc_info=cause)  # the refusal line comes last
            self._cannot_start(zctx, reason(cause))
            pull.close()
            zctx.term()  # after the message left, or CANNOT_START_LINGER_MS without a gateway
            return refuse(f"worker {self.worker_id}", cause)
        dealer = self._dealer(zctx, 2000)
        lost = dealer.get_monitor_socket(zmq.EVENT_DISCONNECTED)
        dealer.connect(self.settings.zmq_endpoint)
        signal.signal(signal.SIGTERM, lambda *_: self._stop.set())
        signal.signal(signal.SIGINT, lambda *_: self._stop.set())

        outbox = Outbox(dealer)
        outbox.send(encode(self.status(Ready)))
        on_up()
        log.info("%s: ready, connected to %s%s", self.worker_id, self.settings.zmq_endpoint,
                 " (CURVE)" if self.keys else "")
        poller = zmq.Poller()
        beat = self.settings.heartbeat_s
        next_beat = time.monotonic() + beat
        left: list[str] | None = None  # requests handed back, once draining
        while left is None or thread.is_alive() or pull.poll(0):
            if self.refused_by_gateway and left is None:  # never admitted: nothing to hand back or answer
                self.scheduler.stop()
                left = []
            elif left is None and self._stop.is_set():  # SIGTERM: hand the queue back
                left = self.scheduler.stop()
                outbox.send(encode(Drain(worker_id=self.worker_id, request_ids=left)))
                log.info("%s: draining, %d queued requests handed back", self.worker_id, len(left))
            elif left is None and not thread.is_alive():  # crashed: exit non-zero, get restarted
                log.error("%s: scheduler thread died; exiting", self.worker_id)
                return 1
            # back-pressure: while the outbox is full, results wait in the scheduler's socket
            poller.register(dealer, zmq.POLLIN | (zmq.POLLOUT if outbox.waiting else 0))
            poller.register(pull, 0 if outbox.full else zmq.POLLIN)
            poller.register(lost, zmq.POLLIN)
            events = dict(poller.poll(timeout=max(0.0, next_beat - time.monotonic()) * 1000))
            if events.get(dealer, 0) & zmq.POLLIN:
                try:
                    reply = self._on_message(decode(dealer.recv()))
                except ValueError as exc:
                    log.warning("dropped a bad frame: %s", exc)
                else:
                    if reply is not None:
                        outbox.send(encode(reply))
            if events.get(dealer, 0) & zmq.POLLOUT:
                outbox.flush()
            if pull in events:
                outbox.send(pull.recv())
            if lost in events:
                lost.recv_multipart()
                self._gateway_lost()
            if time.monotonic() >= next_beat:
                outbox.send_status(encode(self.status()))
                next_beat = time.monotonic() + beat
        if not outbox.flush_for(EXIT_FLUSH_S):
            log.warning("%s: gateway not reading; %d messages unsent at exit", self.worker_id, len(outbox.held))
        dealer.disable_monitor()
        lost.close()
        dealer.close()
        pull.close()
        zctx.term()
        if self.refused_by_gateway:
            log.error("%s: the gateway refused it", self.worker_id)  # the refusal line comes last
            return refuse(f"worker {self.worker_id}", RuntimeError(self.refused_by_gateway))
        log.info("%s: drained, exiting", self.worker_id)
        return 0


def run_worker_process(settings: Settings, *, index: int, cores: str = "", worker_id: str = "") -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    name = f"worker {worker_id or f'w{index:02d}'}"
    guard = StartGuard(settings.run_path, name)  # a crash before Ready: back-off, then an end (shared/start_guard.py)
    try:
        if wait := guard.begin():
            log.warning("%s: its last start crashed before it was up; waiting %.0f s", name, wait)
            time.sleep(wait)
        process = WorkerProcess(settings, index=index, cores=cores, worker_id=worker_id)
    except Exception as exc:  # keys, cores, profile or model file: nothing a restart would change
        guard.done()
        log.exception("%s could not start", name)
        return refuse(name, exc)
    code = process.serve(on_up=guard.done)
    if code == REFUSED:
        guard.done()
    return code
