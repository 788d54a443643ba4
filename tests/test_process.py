"""The worker process's protocol — register, drain on SIGTERM, exit codes — run as a real
process with a stand-in engine (no model), talking to a ROUTER played by the test."""
from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time

import pytest
import zmq

from shared.config import PROJECT_ROOT
from shared.messages import (Cancel, CannotStart, Drain, Error, Heartbeat, Ping, Ready, Refuse, Result, Score, decode,
                             encode)
from shared.refusal import MARK, REFUSED, refusal_in

WORKER = """
import sys, time
import worker.process as wp
from shared.config import default_settings
from worker.status import EngineStatus

class SlowEngine:
    max_batch_requests = 8
    status = EngineStatus()
    arithmetic = "0" * 16
    def tokenize(self, text, add_bos=False):
        return [len(text)]
    def new_tokens(self, job, earlier):
        return len(job.prefix) + sum(map(len, job.suffixes))
    def run(self, jobs):
        if any(job.prefix[0] == 666 for job in jobs):
            raise SystemExit("the engine thread dies")  # not an Exception: the thread ends
        time.sleep(PAUSE)
        for job in jobs:
            job.margins = [1.0] * len(job.suffixes)
        return sum(len(job.prefix) for job in jobs)

PAUSE = float(sys.argv[2]) if len(sys.argv) > 2 else 1.5  # seconds per batch
wp.build_engine = lambda *args: SlowEngine()
wp.resolve_model = lambda *args: None
wp.file_sha256 = lambda path: "0" * 64
wp.startup_warmup = lambda *args: None
wp.build_description = lambda: "stand-in"
settings = default_settings(endpoint=sys.argv[1], heartbeat_s=0.1, cores_per_worker=1, warmup=0)
sys.exit(wp.run_worker_process(settings, index=0, worker_id="fake"))
"""


def score(rid: str, first_token: int = 1) -> Score:
    # 300 tokens: more than half the 384-token budget, so each request is a batch of its own
    return Score(request_id=rid, prefix=[first_token] * 300, suffixes=[[5]], yes_ids=[8], no_ids=[9],
                 deadline=time.time() + 60)


@pytest.fixture
def router(tmp_path, request):
    """A ROUTER played by the test and a worker process connected to it; a test marked
    `pytest.mark.batch_pause(s)` gets an engine that takes s seconds per batch (default 1.5)."""
    ctx = zmq.Context()
    sock = ctx.socket(zmq.ROUTER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.SNDHWM, 0)  # the test may send faster than the worker reads: queue, never drop
    sock.setsockopt(zmq.RCVHWM, 100)  # a small receive queue: a gateway that stops reading fills it soon
    endpoint = f"ipc://{tmp_path}/w.ipc"
    sock.bind(endpoint)
    pause = request.node.get_closest_marker("batch_pause")
    proc = subprocess.Popen([sys.executable, "-c", WORKER, endpoint, str(pause.args[0] if pause else 1.5)],
                            cwd=PROJECT_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        yield sock, proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        sock.close()
        ctx.term()


IDENTITIES: dict[int, bytes] = {}  # id(router socket) → the worker's routing identity, as its messages came


def worker_identity(sock: zmq.Socket) -> bytes:
    """Where to send to the worker: the identity its messages came from (one of its own per process)."""
    return IDENTITIES[id(sock)]


def receive(sock: zmq.Socket, until, timeout: float = 20.0) -> list:
    """Messages from the worker until until(msg) holds for one of them."""
    got, deadline = [], time.monotonic() + timeout
    while time.monotonic() < deadline:
        if sock.poll(100):
            IDENTITIES[id(sock)], frame = sock.recv_multipart()[-2:]
            got.append(decode(frame))
            if until(got[-1]):
                return got
    raise AssertionError(f"worker never sent the awaited message; got {got[-5:]}")


def test_sigterm_hands_the_queue_back_finishes_the_batch_and_exits_0(router):
    sock, proc = router
    receive(sock, lambda m: isinstance(m, Ready))
    ident = worker_identity(sock)
    for rid in ("r1", "r2", "r3"):
        sock.send_multipart([ident, encode(score(rid))])
    # r1 running (counted in requests only), r2 and r3 queued (2 × 301 tokens)
    receive(sock, lambda m: isinstance(m, Heartbeat) and (m.stats.queued_requests, m.stats.queued_tokens) == (3, 602))
    proc.send_signal(signal.SIGTERM)
    (drain,) = [m for m in receive(sock, lambda m: isinstance(m, Drain)) if isinstance(m, Drain)]
    assert drain.request_ids == ["r2", "r3"]  # r1 is running and will be answered
    sock.send_multipart([ident, encode(score("late"))])
    rest = receive(sock, lambda m: isinstance(m, Result))
    assert Error(request_id="late", code="draining", message="worker is stopping") in rest
    assert rest[-1].request_id == "r1"
    assert any(isinstance(m, Heartbeat) and m.draining for m in rest)
    assert proc.wait(timeout=20) == 0, proc.stdout.read()


def test_a_worker_the_gateway_refuses_exits_2_with_the_reason_as_its_last_line(router):
    """A Refuse after its Ready (the gateway saw its id held by a live worker): no Drain, exit 2,
    so supervisord does not start it again and `jevfleet serve` prints the line."""
    sock, proc = router
    first = receive(sock, lambda m: isinstance(m, Ready))[-1]
    assert worker_identity(sock).startswith(f"fake/{first.pid}/".encode())  # its own, not the bare id
    reason = "worker id fake is held by a live worker (pid 1); start this one with another --id (or --index)"
    sock.send_multipart([worker_identity(sock), encode(Refuse(reason=reason))])
    assert proc.wait(timeout=20) == REFUSED
    out = proc.stdout.read()
    assert refusal_in(out) == reason and out.rstrip().endswith(reason)
    while sock.poll(0):
        assert not isinstance(decode(sock.recv_multipart()[-1]), Drain)


def test_cancel_drops_a_queued_request_and_says_so_but_lets_a_running_one_finish(router):
    sock, proc = router
    receive(sock, lambda m: isinstance(m, Ready))
    ident = worker_identity(sock)
    for rid in ("r1", "r2"):
        sock.send_multipart([ident, encode(score(rid))])
    receive(sock, lambda m: isinstance(m, Heartbeat) and (m.stats.queued_requests, m.stats.queued_tokens) == (2, 301))
    for rid in ("r2", "r1"):
        sock.send_multipart([ident, encode(Cancel(request_id=rid))])
    got = receive(sock, lambda m: isinstance(m, Result))
    assert [m for m in got if isinstance(m, Error)] == [Error(request_id="r2", code="cancelled",
                                                              message="dropped before it ran")]
    assert got[-1].request_id == "r1"


def test_a_dead_engine_thread_exits_non_zero_so_supervisord_restarts_it(router):
    sock, proc = router
    receive(sock, lambda m: isinstance(m, Ready))
    sock.send_multipart([worker_identity(sock), encode(score("boom", first_token=666))])
    assert proc.wait(timeout=20) == 1
    assert "scheduler thread died" in proc.stdout.read()


def test_a_worker_that_cannot_start_exits_2_with_its_reason_as_its_last_line():
    """Exit 2 is what supervisord does not restart and `jevfleet serve` stops on (shared/refusal.py)."""
    out = subprocess.run([sys.executable, "-m", "jevfleet", "worker", "--cores", "4096"], cwd=PROJECT_ROOT,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == REFUSED
    assert refusal_in(out.stderr) == out.stderr.splitlines()[-1].partition(MARK)[2]
    assert "cores [4096] are not available" in refusal_in(out.stderr)


def test_an_engine_refused_on_the_model_thread_exits_2_before_ready(tmp_path):
    """The start-up canary's refusal (or a model that does not load) happens on the model thread;
    the worker tells the gateway why instead of Ready, says it in its last line, and exits 2."""
    refusing = WORKER.replace("wp.build_engine = lambda *args: SlowEngine()", "wp.build_engine = refuse",
                              ).replace("PAUSE = ", "from worker.canary import CanaryError\n"
                                        "def refuse(*args):\n    raise CanaryError('start-up canary: moved')\nPAUSE = ")
    ctx = zmq.Context()
    sock = ctx.socket(zmq.ROUTER)
    endpoint = f"ipc://{tmp_path}/w.ipc"
    sock.bind(endpoint)
    try:
        out = subprocess.run([sys.executable, "-c", refusing, endpoint], cwd=PROJECT_ROOT, capture_output=True,
                             text=True, timeout=60)
        assert out.returncode == REFUSED, out.stderr
        assert refusal_in(out.stderr) == "start-up canary: moved"
        assert sock.poll(5000), "the worker never told the gateway why it could not start"
        identity, frame = sock.recv_multipart()
        assert decode(frame) == CannotStart(worker_id="fake", pid=decode(frame).pid, reason="start-up canary: moved")
        assert not sock.poll(0)  # no Ready, nothing else
    finally:
        sock.close(linger=0)
        ctx.term()


@pytest.mark.batch_pause(0)
def test_results_wait_for_a_gateway_that_stops_reading_longer_than_the_buffers_hold(router):
    """5000 answers, about 1.5 MB, against ZeroMQ's queues (1000 + 100 messages) and the socket
    buffers: the test reads nothing until the worker says it is holding results, then every
    request is answered exactly once."""
    sock, proc = router
    receive(sock, lambda m: isinstance(m, Ready))
    rids = [f"r{i}" for i in range(5000)]
    for rid in rids:
        sock.send_multipart([worker_identity(sock), encode(Score(request_id=rid, prefix=[1, 2], suffixes=[[5]] * 20, yes_ids=[8],
                                                   no_ids=[9], deadline=time.time() + 600))])
    await_log_line(proc, "holding results")
    answered: list[str] = []
    deadline = time.monotonic() + 120
    while len(answered) < len(rids) and time.monotonic() < deadline:
        if sock.poll(100):
            msg = decode(sock.recv_multipart()[-1])
            if isinstance(msg, Result):
                answered.append(msg.request_id)
    assert sorted(answered) == sorted(rids)  # every one, each once


def await_log_line(proc: subprocess.Popen, text: str, timeout: float = 60) -> None:
    """Read the worker's log (stdout) until a line contains `text`."""
    found, lines = threading.Event(), []

    def read() -> None:
        for line in proc.stdout:
            lines.append(line)
            if text in line:
                found.set()
                return

    threading.Thread(target=read, daemon=True).start()
    assert found.wait(timeout), "".join(lines[-20:])


def test_when_the_gateway_connection_drops_the_queued_requests_are_dropped_and_the_running_one_finishes(router):
    sock, proc = router
    receive(sock, lambda m: isinstance(m, Ready))
    for rid in ("r1", "r2", "r3"):
        sock.send_multipart([worker_identity(sock), encode(score(rid))])
    receive(sock, lambda m: isinstance(m, Heartbeat) and m.stats.queued_requests == 3)
    endpoint = sock.getsockopt_string(zmq.LAST_ENDPOINT)
    sock.close(linger=0)  # the gateway is gone
    await_log_line(proc, "gateway connection lost; dropped 2 queued requests")
    successor = zmq.Context.instance().socket(zmq.ROUTER)
    successor.bind(endpoint)
    try:  # the worker comes back to the new gateway with nothing queued but what was running
        beat = receive(successor, lambda m: isinstance(m, Heartbeat) and m.stats.queued_requests == 0)[-1]
        assert beat.stats.cancelled == 2
    finally:
        successor.close(linger=0)


@pytest.mark.batch_pause(0)
def test_a_message_only_a_worker_sends_is_ignored_and_a_ping_needs_no_answer(router):
    sock, proc = router
    receive(sock, lambda m: isinstance(m, Ready))
    sock.send_multipart([worker_identity(sock), encode(Ping())])
    sock.send_multipart([worker_identity(sock), encode(Result(request_id="x", margins=[], queue_ms=0.0, run_ms=0.0,
                                                batch_requests=1, read_tokens=0))])
    sock.send_multipart([worker_identity(sock), encode(score("r1"))])
    got = receive(sock, lambda m: isinstance(m, Result))
    assert got[-1].request_id == "r1" and all(isinstance(m, (Heartbeat, Result)) for m in got)
    await_log_line(proc, "ignored a Result")
