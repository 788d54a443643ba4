"""Gateway-side overhead of one decision request: the Server-Timing phases parse, validate,
tokenize and respond (p50/p99), for a short request and for a 1024-question request.

By default it starts a real gateway process (`jevfleet gateway`) with a stub worker that answers
every job at once, so the figures are the gateway's own work without model time and many
samples are cheap. With --url it measures a running fleet instead (the real model; use few
samples for the 1024-question request, each costs seconds of inference).

    .venv/bin/python -m bench.gateway_overhead [--short 300] [--large 30] [--url http://127.0.0.1:8017]
"""
from __future__ import annotations

import argparse
import http.client
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

import zmq

from shared.messages import Ready, Result, Score, decode, encode
from tests.fleet import ROOT, free_port

GATEWAY_PHASES = ("parse", "validate", "tokenize", "respond")
SHORT = {"model": "jev-latest", "state": "I was charged twice for the same order.", "questions": {
    "billing": {"type": "noul", "instructions": "Is this a billing problem?"},
    "team": {"type": "choice", "instructions": "Which team should handle it?",
             "criteria": {"billing": "payments, refunds", "tech": None}},
    "anger": {"type": "score", "instructions": "How upset is the customer?", "criteria": ["calm", "annoyed", "furious"]},
}}
LARGE = {**SHORT, "questions": {f"q{i:04d}": {"type": "noul", "instructions": f"Does the text mention item {i}?"}
                                for i in range(1024)}}


class StubWorker(threading.Thread):
    """A worker that answers every job with a zero margin at once (no model)."""

    def __init__(self, endpoint: str) -> None:
        super().__init__(daemon=True)
        self.endpoint = endpoint
        self.stop = threading.Event()

    def run(self) -> None:
        zctx = zmq.Context()
        sock = zctx.socket(zmq.DEALER)
        sock.setsockopt_string(zmq.IDENTITY, "bench/stub")
        sock.setsockopt(zmq.LINGER, 0)
        sock.connect(self.endpoint)
        ready = Ready(worker_id="bench/stub", pid=os.getpid(), cores=[], model="stub", model_sha256="0" * 64,
                      fingerprint="stub")
        next_beat = 0.0
        while not self.stop.is_set():
            if time.monotonic() >= next_beat:
                sock.send(encode(ready))
                next_beat = time.monotonic() + 0.25
            if sock.poll(50):
                msg = decode(sock.recv())
                if isinstance(msg, Score):
                    sock.send(encode(Result(request_id=msg.request_id, margins=[0.0] * len(msg.suffixes), queue_ms=0.0,
                                            run_ms=0.0, batch_requests=1, read_tokens=0)))
        sock.close()
        zctx.term()


def wait_ready(url: str, timeout: float = 120) -> None:
    parts = urlsplit(url)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=5)
            conn.request("GET", "/health")
            resp = conn.getresponse()
            if resp.status == 200 and json.loads(resp.read()).get("status") == "ready":
                return
        except (OSError, ValueError):
            pass
        time.sleep(0.2)
    raise TimeoutError(f"{url} not ready after {timeout}s")


def measure(url: str, body: dict, n: int) -> list[dict[str, float]]:
    """Server-Timing phases (ms) of n sequential requests, plus the client's round trip."""
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=600)
    raw = json.dumps(body).encode()
    samples = []
    for _ in range(n):
        start = time.perf_counter()
        conn.request("POST", "/v1/systemone", body=raw, headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        resp.read()
        round_trip = (time.perf_counter() - start) * 1000
        if resp.status != 200:
            raise RuntimeError(f"status {resp.status}")
        phases = {k: float(v) for k, v in (p.split(";dur=") for p in resp.getheader("Server-Timing").split(", "))}
        phases["overhead"] = sum(phases[p] for p in GATEWAY_PHASES)
        phases["round trip"] = round_trip
        samples.append(phases)
    conn.close()
    return samples


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered)) - 1))]


def table(results: dict[str, list[dict[str, float]]]) -> str:
    rows = [*GATEWAY_PHASES, "overhead", "queue", "inference", "total", "round trip"]
    names = list(results)
    head = f"{'ms':<12}" + "".join(f"{f'{n} p50':>16}{f'{n} p99':>16}" for n in names)
    lines = [head, "-" * len(head)]
    for row in rows:
        cells = "".join(f"{percentile([s[row] for s in results[n]], 0.5):>16.2f}"
                        f"{percentile([s[row] for s in results[n]], 0.99):>16.2f}" for n in names)
        lines.append(f"{row:<12}{cells}")
    lines.append(f"{'samples':<12}" + "".join(f"{len(results[n]):>16}{'':>16}" for n in names))
    return "\n".join(lines)


def run(url: str, short: int, large: int) -> None:
    measure(url, SHORT, 3)  # warm connections, caches and the tokenizer pool
    results = {"short": measure(url, SHORT, short), "1024 q": measure(url, LARGE, large)}
    print(table(results))
    print("overhead = parse + validate + tokenize + respond (gateway work, from Server-Timing)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="measure this running fleet instead of a gateway with a stub worker")
    parser.add_argument("--short", type=int, default=300, help="short requests to time (default 300)")
    parser.add_argument("--large", type=int, default=30, help="1024-question requests to time (default 30)")
    args = parser.parse_args()
    if args.url:
        run(args.url, args.short, args.large)
        return 0
    port = free_port()
    with tempfile.TemporaryDirectory() as run_dir:
        cmd = [sys.executable, "-m", "jevfleet", "gateway", "--port", str(port), "--workers", "1", "--run-dir", run_dir]
        log = open(Path(run_dir) / "gateway.log", "w")
        gateway = subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
        stub = StubWorker(f"ipc://{run_dir}/workers.ipc")
        stub.start()
        try:
            url = f"http://127.0.0.1:{port}"
            wait_ready(url)
            print(f"gateway {url} with a stub worker (no model time)")
            run(url, args.short, args.large)
        finally:
            stub.stop.set()
            gateway.terminate()
            gateway.wait(timeout=60)
    return 0


if __name__ == "__main__":
    sys.exit(main())
