"""jevfleet/harness: the one percentile, waiting with a deadline, stopping processes, the HTTP
helpers against the in-process gateway, and the boundaries: the product never imports the
harness, and nothing outside tests/ imports tests/."""
from __future__ import annotations

import ast
import math
import subprocess
import sys
from pathlib import Path

import pytest

from client.net import free_port, http, post_json, server_timing
from jevfleet.harness.fleet import health, wait_healthy
from jevfleet.harness.processes import stop_process, stop_processes, wait_until
from jevfleet.harness.stats import percentile
from shared.config import PROJECT_ROOT
from tests.inprocess import InProcessGateway

PRODUCT = ("gateway", "worker", "shared", "client", "jevfleet")  # what `jevfleet serve` and `decide` run
# The code's layers from the bottom up (docs/architecture.md): a package imports only its own
# layer's and those below it. jevfleet/harness sits with the command's package it lives in.
LAYERS = (("shared",), ("gateway", "worker"), ("client",), ("quality",), ("jevfleet", "deploy"), ("loadtest",),
          ("bench",))


def test_the_percentile_is_an_observed_value_by_nearest_rank():
    latencies = [float(ms) for ms in range(1, 101)]  # 1..100 ms
    assert [percentile(latencies, f) for f in (0.5, 0.9, 0.99, 1.0)] == [50, 90, 99, 100]
    assert percentile([3.0, 1.0, 2.0], 0.5) == 2.0  # order does not matter
    assert percentile([7.5], 0.99) == 7.5
    assert math.isnan(percentile([], 0.5))


def test_a_histogram_has_the_percentiles_of_its_samples_written_out():
    histogram = {10: 50, 20: 40, 100: 9, 900: 1}
    samples = [ms for ms, n in histogram.items() for _ in range(n)]
    for fraction in (0.1, 0.5, 0.9, 0.95, 0.99, 1.0):
        assert percentile(list(histogram), fraction, counts=list(histogram.values())) == percentile(samples, fraction)


def test_wait_until_returns_the_first_value_that_is_done():
    seen = iter(range(10))
    assert wait_until(lambda: next(seen), "three", done=lambda n: n >= 3, every=0) == 3


def test_wait_until_times_out_saying_what_it_waited_for_and_last_saw():
    with pytest.raises(TimeoutError, match=r"not the answer after 0.05 s; last seen 41\nlog tail"):
        wait_until(lambda: 41, "the answer", done=lambda n: n == 42, timeout=0.05, every=0.01, logs=lambda: "log tail")


def test_wait_until_fails_at_once_when_the_process_it_waits_for_has_exited():
    proc = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    proc.wait()
    with pytest.raises(RuntimeError, match=r"process exited \(3\) while waiting for ready"):
        wait_until(lambda: False, "ready", timeout=60, proc=proc)


def test_stop_sends_sigterm_to_all_and_kills_what_ignores_it():
    polite = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    stubborn = subprocess.Popen([sys.executable, "-c", "import signal, sys, time\n"
                                 "signal.signal(signal.SIGTERM, signal.SIG_IGN); print('ignoring', flush=True)\n"
                                 "time.sleep(60)"], stdout=subprocess.PIPE, text=True)
    assert stubborn.stdout.readline() == "ignoring\n"  # the handler is set before we signal
    assert stop_processes([polite, stubborn], timeout=1) == [-15, -9]
    assert stop_process(polite) == -15  # already stopped: its exit code again, nothing sent


def test_http_hands_back_error_statuses_and_health_reads_the_gateway(gateway):
    status, _, body = http("GET", gateway.url + "/no-such-route")
    assert status == 404 and body
    status, body = health(gateway.url)
    assert status == 200 and body["status"] == "ready"
    assert wait_healthy(gateway.url, timeout=5)["status"] == "ready"
    request = {"model": "jev-latest", "state": "It rained.", "questions": {"q": {"type": "noul", "instructions": "Wet?"}}}
    status, headers, answer = post_json(gateway.url + "/v1/systemone", request)
    assert status == 200 and 0 <= answer["answers"]["q"]["noul"] <= 1
    phases = server_timing(headers)
    assert {"parse", "validate", "tokenize", "total"} <= set(phases) and phases["total"] >= 0


def test_health_of_a_port_nothing_listens_on_is_status_0():
    assert health(f"http://127.0.0.1:{free_port()}") == (0, {})


def imported_modules(path: Path) -> set[str]:
    modules = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            modules.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            modules.add(node.module)
    return modules


def sources(*folders: str) -> list[Path]:
    return [p for folder in folders for p in sorted((PROJECT_ROOT / folder).rglob("*.py"))]


def test_the_product_never_imports_the_harness():
    harness = PROJECT_ROOT / "jevfleet" / "harness"
    offenders = {str(p.relative_to(PROJECT_ROOT)) for p in sources(*PRODUCT) if harness not in p.parents
                 and any(m == "jevfleet.harness" or m.startswith("jevfleet.harness.") for m in imported_modules(p))}
    assert not offenders


def test_nothing_outside_tests_imports_tests():
    offenders = {str(p.relative_to(PROJECT_ROOT)) for p in sources(*PRODUCT, "bench", "loadtest", "quality")
                 if any(m == "tests" or m.startswith("tests.") for m in imported_modules(p))}
    assert not offenders


def test_no_import_runs_up_a_layer():
    layer_of = {package: height for height, packages in enumerate(LAYERS) for package in packages}
    offenders = {f"{p.relative_to(PROJECT_ROOT)} imports {m}" for p in sources(*layer_of)
                 for m in imported_modules(p) if layer_of.get(m.split(".")[0], -1) > layer_of[p.relative_to(PROJECT_ROOT).parts[0]]}
    assert not offenders


def module_name(path: Path) -> str:
    name = ".".join(path.relative_to(PROJECT_ROOT).with_suffix("").parts)
    return name.removesuffix(".__init__")


def test_no_module_imports_one_that_imports_it_back():
    """Directly or through others, imports under TYPE_CHECKING included: each module has one role
    and a caller, not a partner."""
    graph = {module_name(p): imported_modules(p) for p in sources("gateway", "worker", "shared", "client", "jevfleet", "quality")}
    cyclic = set()
    for start in graph:
        seen, todo = set(), [start]
        while todo:
            for module in graph.get(todo.pop(), ()):
                if module not in seen:
                    seen.add(module)
                    todo.append(module)
        if start in seen:
            cyclic.add(start)
    assert not cyclic


def test_health_ready_asks_for_every_worker_plain_health_for_any(tmp_path):
    """A readiness probe (Kubernetes, deploy/kubernetes/) asks /health?ready: a unit expecting two
    workers with one up serves (200, degraded) but is not ready (503) until the second joins."""
    half = InProcessGateway(tmp_path, workers=2)
    try:
        status, body = health(half.url)
        assert status == 200 and body["status"] == "degraded"
        assert http("GET", half.url + "/health?ready")[0] == 503
    finally:
        half.stop()


def test_health_ready_is_200_once_every_worker_is_up(gateway):
    assert http("GET", gateway.url + "/health?ready")[0] == 200


def test_a_kept_connection_the_server_closed_while_idle_is_opened_again():
    """As the gateway closes a connection idle for header_timeout_s: the next request reconnects."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from client.net import KeptConnection

    class CloseAfterEach(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # kept open as far as the client knows, closed here after each

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            self.close_connection = True

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), CloseAfterEach)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        conn = KeptConnection(f"http://127.0.0.1:{server.server_address[1]}")
        assert [conn.post("/", f"{k}".encode())[::2] for k in range(3)] == [(200, b"0"), (200, b"1"), (200, b"2")]
        conn.close()
    finally:
        server.shutdown()
