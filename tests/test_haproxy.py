"""`jevfleet haproxy-conf`: the configuration it renders from conf/haproxy.cfg, checked by HAProxy
itself where it is installed (make test installs it when run as root), and its request log read
from a real HAProxy's standard output (a stand-in gateway behind it: this tests the front only)."""
from __future__ import annotations

import json
import shutil
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from client.net import free_port, http
from jevfleet.haproxy import qualified, render_haproxy_conf
from jevfleet.harness.processes import stop_process, wait_until
from shared.config import default_settings

needs_haproxy = pytest.mark.skipif(shutil.which("haproxy") is None, reason="haproxy is not installed")


def render(tmp_path, retry: bool) -> str:
    return render_haproxy_conf(default_settings(), ["10.0.0.2:8017", "10.0.0.3:8017"], bind="127.0.0.1:8080",
                               stats_socket=str(tmp_path / "s.sock"), retry=retry)


def test_every_gateway_is_a_health_checked_server_and_retries_can_be_left_out(tmp_path):
    with_retries, without = render(tmp_path, True), render(tmp_path, False)
    assert "server gw1 10.0.0.2:8017 check" in with_retries and "server gw2 10.0.0.3:8017 check" in with_retries
    assert "option httpchk GET /health" in with_retries
    assert "option redispatch" in with_retries and "retry-on none" not in with_retries
    assert "option redispatch" not in without and "retry-on none" in without
    assert "json_query('$.state')" in with_retries  # the template's $$ came out as one $


@needs_haproxy
@pytest.mark.parametrize("retry", [True, False])
def test_haproxy_accepts_the_rendered_configuration(tmp_path, retry):
    conf = tmp_path / "haproxy.cfg"
    conf.write_text(render(tmp_path, retry))
    check = subprocess.run(["haproxy", "-c", "-f", str(conf)], capture_output=True, text=True, timeout=30)
    assert check.returncode == 0, check.stdout + check.stderr


def test_discover_turns_one_dns_name_into_server_slots_resolved_again(tmp_path):
    conf = render_haproxy_conf(default_settings(), ["units.example:8017"], bind=":8017",
                               stats_socket=str(tmp_path / "s.sock"), discover=8)
    assert "server-template gw 8 units.example:8017 check resolvers dns init-addr none" in conf
    assert "\nresolvers dns\n    parse-resolv-conf\n" in conf and "server gw1" not in conf
    assert "    hold obsolete 30s\n" in conf  # a unit missing from one DNS answer keeps its slot
    assert "    hold timeout 300s\n" in conf  # and every unit its slot while the name server is silent
    with pytest.raises(ValueError):
        render_haproxy_conf(default_settings(), ["a:1", "b:1"], bind=":1", stats_socket="s", discover=2)


def test_a_short_name_takes_the_first_search_domain_as_a_pods_lookup_would(tmp_path):
    resolv = tmp_path / "resolv.conf"
    resolv.write_text("nameserver 10.96.0.10\nsearch shop.svc.cluster.local svc.cluster.local cluster.local\n")
    assert qualified("jevfleet-units", resolv) == "jevfleet-units.shop.svc.cluster.local"
    assert qualified("units.other.svc.cluster.local", resolv) == "units.other.svc.cluster.local"
    resolv.write_text("nameserver 10.0.0.1\n")
    assert qualified("units", resolv) == "units"


@needs_haproxy
def test_haproxy_accepts_the_discovering_configuration(tmp_path):
    conf = tmp_path / "haproxy.cfg"
    conf.write_text(render_haproxy_conf(default_settings(), ["localhost:8017"], bind="127.0.0.1:8080",
                                        stats_socket=str(tmp_path / "s.sock"), discover=4))
    check = subprocess.run(["haproxy", "-c", "-f", str(conf)], capture_output=True, text=True, timeout=30)
    assert check.returncode == 0, check.stdout + check.stderr


class StandIn(BaseHTTPRequestHandler):
    """A gateway as HAProxy sees it: /health 200, and a 200 JSON answer to a decision request."""

    def _answer(self, status: int, body: dict) -> None:
        raw = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        self._answer(200, {"status": "ready"})

    def do_POST(self) -> None:  # noqa: N802
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self._answer(200, {"answers": {}})

    def log_message(self, *args) -> None:  # quiet
        pass


@needs_haproxy
def test_the_front_logs_each_request_to_standard_output(tmp_path):
    gateway = ThreadingHTTPServer(("127.0.0.1", 0), StandIn)
    threading.Thread(target=gateway.serve_forever, daemon=True).start()
    port = free_port()
    conf = tmp_path / "haproxy.cfg"
    conf.write_text(render_haproxy_conf(default_settings(), [f"127.0.0.1:{gateway.server_address[1]}"],
                                        bind=f"127.0.0.1:{port}", stats_socket=str(tmp_path / "s.sock")))
    out = tmp_path / "haproxy.out"
    with out.open("w") as sink:
        proc = subprocess.Popen(["haproxy", "-db", "-f", str(conf)], stdout=sink, stderr=subprocess.STDOUT)
    try:
        body = json.dumps({"model": "jev-latest", "state": "logged", "questions": {}}).encode()
        status, _, _ = wait_until(lambda: _post(f"http://127.0.0.1:{port}/v1/systemone", body), "HAProxy answering",
                                  done=lambda seen: seen[0] == 200, proc=proc, timeout=30,
                                  logs=lambda: out.read_text())
        assert status == 200
        line = wait_until(lambda: next((x for x in out.read_text().splitlines() if "/v1/systemone" in x), ""),
                          "the request in HAProxy's log", proc=proc, timeout=10, logs=lambda: out.read_text())
    finally:
        stop_process(proc, timeout=10)
        gateway.shutdown()
    # httplog: the front, the gateway that answered, the status and the request line
    assert "jevfleet jevfleet/gw1" in line and " 200 " in line and '"POST /v1/systemone HTTP/1.1"' in line, line


def _post(url: str, body: bytes) -> tuple[int, dict, bytes]:
    try:
        return http("POST", url, body, {"Content-Type": "application/json"}, timeout=5)
    except OSError:
        return 0, {}, b""
