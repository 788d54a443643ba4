"""Black-box: a worker on "another host" — its own network namespace, joined to the gateway's
by a veth pair — connects over tcp:// with CURVE keys and serves requests.

The test creates both namespaces and the pair, and removes them; it is skipped, saying why,
where it may not (no root, no `ip`, no namespace support). The private addresses it uses
exist only inside those namespaces.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from jevfleet.harness.load import decision
from shared.config import PROJECT_ROOT
from shared.curve import make_keys
from tests import netns

pytestmark = pytest.mark.fleet

TAG = os.getpid() % 100000
GW_NS, WK_NS = f"jevgw{TAG}", f"jevwk{TAG}"
GW_IF, WK_IF = f"jvg{TAG}", f"jvw{TAG}"
GW_ADDR, WK_ADDR = "10.213.7.1", "10.213.7.2"
ZMQ_PORT = 5557

CLIENT = """
import json, sys
from jevfleet.harness.fleet import wait_healthy
from client.net import http
url, payload = sys.argv[1], sys.argv[2].encode()
health = wait_healthy(url, timeout=180)
status, _, raw = http("POST", url + "/v1/systemone", payload, {"Content-Type": "application/json"}, timeout=120)
print(json.dumps({"health": health, "status": status, "body": json.loads(raw) if status == 200 else raw.decode()}))
"""


@pytest.fixture
def two_hosts():
    """Two network namespaces linked by a veth pair: GW_ADDR in one, WK_ADDR in the other."""
    netns.require_netns()
    try:
        for ns in (GW_NS, WK_NS):
            netns.add(ns)
        netns.sh("ip", "link", "add", GW_IF, "netns", GW_NS, "type", "veth", "peer", "name", WK_IF, "netns", WK_NS)
        for ns, ifname, addr in ((GW_NS, GW_IF, GW_ADDR), (WK_NS, WK_IF, WK_ADDR)):
            netns.sh("ip", "-n", ns, "addr", "add", f"{addr}/30", "dev", ifname)
            netns.sh("ip", "-n", ns, "link", "set", ifname, "up")
    except subprocess.CalledProcessError as exc:
        for ns in (GW_NS, WK_NS):
            netns.delete(ns)
        pytest.skip(f"cannot set up network namespaces here: {' '.join(exc.cmd)}: {exc.stderr.strip()}")
    try:
        yield
    finally:
        for ns in (GW_NS, WK_NS):
            netns.delete(ns)


def in_ns(ns: str, *args: str) -> list[str]:
    return netns.exec_in(ns, sys.executable, *args)


def test_a_worker_on_another_host_serves_over_curve(two_hosts, tmp_path):
    keys = tmp_path / "keys"
    make_keys(keys)
    endpoint = f"tcp://{GW_ADDR}:{ZMQ_PORT}"
    gateway = subprocess.Popen(
        in_ns(GW_NS, "-m", "jevfleet", "gateway", "--port", "8017", "--workers", "1", "--endpoint", endpoint,
              "--run-dir", str(tmp_path / "gw"), "--curve-key", str(keys / "gateway.key_secret"),
              "--curve-clients", str(keys / "workers")),
        cwd=PROJECT_ROOT, stdout=open(tmp_path / "gateway.log", "w"), stderr=subprocess.STDOUT)
    worker = subprocess.Popen(
        in_ns(WK_NS, "-m", "jevfleet", "worker", "--id", "remote-w00", "--endpoint", endpoint,
              "--run-dir", str(tmp_path / "wk"), "--cores-per-worker", "1",
              "--curve-key", str(keys / "workers" / "worker-00.key_secret"),
              "--curve-server-key", str(keys / "gateway.key")),
        cwd=PROJECT_ROOT, stdout=open(tmp_path / "worker.log", "w"), stderr=subprocess.STDOUT)
    try:
        out = subprocess.run(in_ns(GW_NS, "-c", CLIENT, "http://127.0.0.1:8017",
                                   json.dumps(decision("I was charged twice for one order."))),
                             capture_output=True, text=True, timeout=300)
        logs = "".join(f"\n--- {p.name}\n{p.read_text()[-2000:]}" for p in sorted(tmp_path.glob("*.log")))
        assert out.returncode == 0, out.stderr + logs
        seen = json.loads(out.stdout)
        (remote,) = seen["health"]["workers"]
        assert remote["id"] == "remote-w00" and remote["state"] == "up", logs
        assert seen["status"] == 200 and 0.0 <= seen["body"]["answers"]["q"]["noul"] <= 1.0, seen
        assert "(CURVE)" in (tmp_path / "worker.log").read_text()
        for proc in (worker, gateway):  # SIGTERM: drain and exit 0, remote or not
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=60) == 0, logs
    finally:
        for proc in (worker, gateway):
            if proc.poll() is None:
                proc.kill()
                proc.wait()
