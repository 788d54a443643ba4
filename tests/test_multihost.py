"""Black-box: one service over four "hosts" — network namespaces on one bridge, made and removed
by this test — with the real model, HAProxy and supervisord in every role:

    A 10.213.9.1  HAProxy (two instances: conf/haproxy.cfg with retries, and without) + the clients
    B 10.213.9.2  `serve --role gateway` (tcp, CURVE) + `serve --role workers` (1 worker, to B)
    C 10.213.9.3  `serve` (gateway + 1 worker, one host as usual)
    D 10.213.9.4  `serve --role workers` (1 worker, over tcp with CURVE to B)

Under closed-loop load through HAProxy: kill -9 C's gateway (without, then with HAProxy's
retries: failures counted, 0 with them), kill -9 D's worker (0 failures), cut D's link and
bring it back (0 failures, D detected and rejoining). The failover timings are printed.
Each host is pinned to a core and runs 1-thread workers with a small context, so it fits 2 cores.
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time

import pytest

from jevfleet.haproxy import render_haproxy_conf
from jevfleet.harness import hosts as harness_hosts
from jevfleet.harness.load import Clients, by_id, decision, post, states
from jevfleet.harness.processes import wait_until
from shared.config import default_settings
from shared.curve import make_keys
from tests import netns

pytestmark = [pytest.mark.fleet, pytest.mark.multihost]

PREFIX = "jevmh"
TAG = str(os.getpid())
HOSTS = {"a": "10.213.9.1", "b": "10.213.9.2", "c": "10.213.9.3", "d": "10.213.9.4"}
HTTP_PORT, ZMQ_PORT = 8017, 5555
LB_RETRY, LB_PLAIN = 8080, 8081  # HAProxy in A: with retries (the shipped config), without
ENDPOINT_B = f"tcp://{HOSTS['b']}:{ZMQ_PORT}"
LIGHT = ["--cores-per-worker", "1", "--threads", "1", "--ctx", "1024", "--state-cache", "2",
         "--state-cache-mb", "9", "--warmup", "0", "--deadline-s", "20"]
CLIENTS = 4
FAILURE_PAUSE_S = 0.1


def ns(host: str) -> str:
    return f"{PREFIX}{TAG}{host}"


class Hosts(harness_hosts.Hosts):
    """The four hosts, serving with the LIGHT flags; HAProxy's view by its port."""

    def serve(self, name: str, host: str, *args: str, core: int) -> None:
        super().serve(name, host, *LIGHT, *args, core=core)

    def lb_status(self, lb: int) -> dict[str, str]:  # gw1 = B, gw2 = C
        return super().lb_status(self.tmp / f"haproxy-{lb}.sock")


@pytest.fixture
def four_hosts(tmp_path):
    """A..D on a bridge in A; always removed afterwards, with any leftovers of a crashed run."""
    netns.require_netns()
    if shutil.which("haproxy") is None:
        pytest.skip("haproxy is not installed (make test installs it when run as root)")
    hosts = Hosts(prefix=PREFIX, link="jmh", addresses=HOSTS, tmp=tmp_path, http_port=HTTP_PORT, tag=TAG)
    try:
        hosts.create()
    except subprocess.CalledProcessError as exc:
        pytest.skip(f"cannot set up network namespaces here: {' '.join(exc.cmd)}: {exc.stderr.strip()}")
    try:
        yield hosts
    finally:
        hosts.remove()


def through(port: int, tag: str) -> Clients:
    """CLIENTS closed-loop clients in A, through HAProxy on `port`, each on its own distinct states."""
    return Clients(f"http://127.0.0.1:{port}", [decision(s) for s in states(400, tag=tag)], CLIENTS,
                   pause_s=FAILURE_PAUSE_S, enter=lambda: netns.enter(ns("a")))


def test_one_service_over_four_hosts_survives_gateway_worker_and_link_loss(four_hosts: Hosts, tmp_path, capsys):
    hosts = four_hosts
    keys = tmp_path / "keys"
    make_keys(keys, workers=2)
    curve_gw = ["--curve-key", str(keys / "gateway.key_secret"), "--curve-clients", str(keys / "workers")]

    def curve_worker(n: int) -> list[str]:
        return ["--curve-key", str(keys / "workers" / f"worker-{n:02d}.key_secret"),
                "--curve-server-key", str(keys / "gateway.key")]

    gateway_http = ["--host", "0.0.0.0", "--port", str(HTTP_PORT)]
    hosts.serve("b-gateway", "b", "--role", "gateway", "--workers", "2", "--endpoint", ENDPOINT_B, *gateway_http,
                *curve_gw, core=0)
    hosts.serve("b-workers", "b", "--role", "workers", "--workers", "1", "--endpoint", ENDPOINT_B,
                *curve_worker(0), core=0)
    hosts.serve("c", "c", "--workers", "1", *gateway_http, core=1)
    hosts.serve("d", "d", "--role", "workers", "--workers", "1", "--endpoint", ENDPOINT_B, *curve_worker(1), core=1)
    settings = default_settings(deadline_s=20)
    gateways = [f"{HOSTS[h]}:{HTTP_PORT}" for h in "bc"]
    for lb, retry in ((LB_RETRY, True), (LB_PLAIN, False)):
        conf = tmp_path / f"haproxy-{lb}.cfg"
        conf.write_text(render_haproxy_conf(settings, gateways, bind=f"127.0.0.1:{lb}", retry=retry,
                                            stats_socket=str(tmp_path / f"haproxy-{lb}.sock")))
        hosts.start(f"haproxy-{lb}", "a", ["haproxy", "-db", "-f", str(conf)])
    timings: dict[str, float] = {}
    failures: dict[str, int] = {}
    details: dict[str, str] = {}
    try:
        # Ready: B serves its own worker and D's, C its own; HAProxy sees both gateways up.
        wait_until(lambda: set(by_id(hosts.health("b"))) >= {"hostb/w00", "hostd/w00"}
                   and hosts.health("b").get("status") == "ready", "B ready with D's worker", timeout=300)
        wait_until(lambda: hosts.health("c").get("status") == "ready", "C ready", timeout=300)
        for lb in (LB_RETRY, LB_PLAIN):
            wait_until(lambda: set(hosts.lb_status(lb).values()) == {"UP"}, f"HAProxy {lb} seeing both gateways")

        # Per gateway, /health and /metrics tell of its own workers only.
        assert set(by_id(hosts.health("b"))) == {"hostb/w00", "hostd/w00"}
        assert set(by_id(hosts.health("c"))) == {"hostc/w00"}
        assert 'worker="hostd/w00"' in hosts.metrics("b") and 'worker="hostd/w00"' not in hosts.metrics("c")
        # The same state reaches the same gateway (HAProxy hashes it), whatever the questions.
        same = [netns.run_in(ns("a"), lambda q=q: post(f"http://127.0.0.1:{LB_RETRY}",
                                                         decision("My parcel never arrived.", q)))
                for q in ("Is it about a parcel?", "Is the writer upset?", "Is it about billing?")]
        assert all(o.status == 200 for o in same), [o.body for o in same]
        assert len({o.headers["x-jevfleet-gateway"] for o in same}) == 1

        # kill -9 C's gateway under load, through HAProxy without retries, then with them.
        for lb, label in ((LB_PLAIN, "without retries"), (LB_RETRY, "with retries")):
            with through(lb, tag=f"{label} ") as load:
                wait_until(lambda: load.answered() >= 4 and hosts.health("c").get("fleet", {}).get("inflight"),
                           "C holding requests under load")
                old = hosts.pid("c", "gateway")
                killed = time.monotonic()
                os.kill(old, signal.SIGKILL)
                wait_until(lambda: hosts.lb_status(lb)["gw2"].startswith("DOWN"), "C out of HAProxy")
                timings[f"gateway kill -> out of HAProxy ({label})"] = time.monotonic() - killed
                wait_until(lambda: hosts.health("c").get("status") == "ready", "C's gateway back")
                wait_until(lambda: hosts.lb_status(lb)["gw2"] == "UP", "C back in HAProxy")
                timings[f"gateway kill -> back in HAProxy ({label})"] = time.monotonic() - killed
                count = load.answered()
                wait_until(lambda: load.answered() >= count + 4, "answers after C is back")
            failures[f"gateway kill, {label}"] = len(load.failures())
            details[f"gateway kill, {label}"] = load.describe_failures(killed)
            assert hosts.pid("c", "gateway") != old
        assert failures["gateway kill, with retries"] == 0, "HAProxy retries should hide a dead gateway"

        # kill -9 D's worker while it holds requests: they are resent on B, none is lost.
        with through(LB_RETRY, tag="worker kill ") as load:
            d = wait_until(lambda: by_id(hosts.health("b")).get("hostd/w00", {}).get("queued_requests")
                           and by_id(hosts.health("b"))["hostd/w00"], "D's worker holding requests")
            resent = hosts.health("b")["fleet"]["resent"]
            killed = time.monotonic()
            os.kill(d["pid"], signal.SIGKILL)
            wait_until(lambda: by_id(hosts.health("b"))["hostd/w00"]["state"] == "down"
                       or by_id(hosts.health("b"))["hostd/w00"]["pid"] != d["pid"], "D's worker seen gone")
            timings["worker kill -> detected by B"] = time.monotonic() - killed
            wait_until(lambda: (w := by_id(hosts.health("b"))["hostd/w00"])["pid"] != d["pid"] and w["state"] == "up",
                       "D's worker restarted and back")
            timings["worker kill -> restarted worker serving"] = time.monotonic() - killed
        failures["worker kill"] = len(load.failures())
        assert failures["worker kill"] == 0, load.failures()[:3]
        assert hosts.health("b")["fleet"]["resent"] > resent

        # Cut D's link while it holds requests, then bring it back.
        with through(LB_RETRY, tag="link cut ") as load:
            wait_until(lambda: by_id(hosts.health("b"))["hostd/w00"]["queued_requests"], "D holding requests")
            resent = hosts.health("b")["fleet"]["resent"]
            cut = time.monotonic()
            hosts.set_link("d", up=False)
            wait_until(lambda: by_id(hosts.health("b"))["hostd/w00"]["state"] == "down", "D seen gone")
            timings["link cut -> D taken out by B"] = time.monotonic() - cut
            count = load.answered()
            wait_until(lambda: load.answered() >= count + 4, "answers while D is cut off")
            hosts.set_link("d", up=True)
            back = time.monotonic()
            wait_until(lambda: by_id(hosts.health("b"))["hostd/w00"]["state"] == "up", "D rejoined")
            timings["link up -> D serving again"] = time.monotonic() - back
        failures["link cut"] = len(load.failures())
        assert failures["link cut"] == 0, load.failures()[:3]
        assert hosts.health("b")["fleet"]["resent"] > resent, "what D held should have been sent again"
    except BaseException:
        print(hosts.logs())
        raise
    finally:
        with capsys.disabled():
            print("\nmulti-host failover (4 namespaces, real model, HAProxy, 2 gateways):")
            for what, seconds in timings.items():
                print(f"  {what:<48} {seconds:6.2f} s")
            for what, n in failures.items():
                print(f"  client-visible failures, {what:<27} {n:6d}  {details.get(what, '')}")
