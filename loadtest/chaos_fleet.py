"""The fleet the chaos run attacks: two gateways behind HAProxy, three one-thread workers, on four
network namespaces on one bridge (jevfleet/harness/hosts.py), as tests/test_multihost.py lays
them out:

    a 10.213.9.1  HAProxy, twice (conf/haproxy.cfg as `jevfleet haproxy-conf` renders it: the shipped
                  front with retries on, and one with them off for the run's last phase) + clients
    b 10.213.9.2  `serve --role gateway` (tcp, CURVE) + `serve --role workers` (hostb/w00, to b)
    c 10.213.9.3  `serve` (gateway + hostc/w00, one host as usual)
    d 10.213.9.4  `serve --role workers` (hostd/w00, over tcp with CURVE to b): the link that is cut

b runs on core 0, c and d on core 1 (taskset), so that three one-thread workers and two
gateways fit two cores. Whole means: both gateways answer /health `ready` with each of their
workers `up`, and HAProxy has both gateways UP.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from jevfleet.haproxy import render_haproxy_conf
from jevfleet.harness.hosts import Hosts
from jevfleet.harness.load import by_id
from shared.config import Settings
from shared.curve import make_keys

ADDRESSES = {"a": "10.213.9.1", "b": "10.213.9.2", "c": "10.213.9.3", "d": "10.213.9.4"}
ZMQ_PORT = 5555
RETRIES_ON, RETRIES_OFF = "retries on", "retries off"  # the two HAProxy fronts
LB_PORTS = {RETRIES_ON: 8080, RETRIES_OFF: 8081}
GATEWAYS = {"b": "b-gateway", "c": "c"}  # gateway host -> the `serve` that runs its gateway
LB_NAMES = {"b": "gw1", "c": "gw2"}  # HAProxy's name for each gateway
WORKERS = {"hostb/w00": ("b-workers", "b"), "hostc/w00": ("c", "c"), "hostd/w00": ("d", "b")}  # -> (serve, gateway)
WORKER_PROGRAM, GATEWAY_PROGRAM = "worker:worker_00", "gateway"
LINK_HOST = "d"


@dataclass
class ChaosFleet:
    hosts: Hosts
    settings: Settings  # of the gateways (deadline_s for HAProxy's timeouts)

    @classmethod
    def layout(cls, tmp: Path, settings: Settings) -> ChaosFleet:
        return cls(Hosts(prefix="jevch", link="jch", addresses=ADDRESSES, tmp=tmp), settings)

    def lb_socket(self, front: str) -> Path:
        return self.hosts.tmp / f"haproxy-{LB_PORTS[front]}.sock"

    @property
    def lb_urls(self) -> dict[str, str]:
        """Each HAProxy front's URL, inside a."""
        return {front: f"http://127.0.0.1:{port}" for front, port in LB_PORTS.items()}

    def start(self, flags: list[str]) -> None:
        """Every process, each `serve` with `flags` besides its role's own."""
        tmp, hosts = self.hosts.tmp, self.hosts
        keys = tmp / "keys"
        make_keys(keys, workers=2)
        endpoint = f"tcp://{ADDRESSES['b']}:{ZMQ_PORT}"
        http = ["--host", "0.0.0.0", "--port", str(hosts.http_port)]

        def curve_worker(n: int) -> list[str]:
            return ["--curve-key", str(keys / "workers" / f"worker-{n:02d}.key_secret"),
                    "--curve-server-key", str(keys / "gateway.key")]

        hosts.serve("b-gateway", "b", *flags, "--role", "gateway", "--workers", "2", "--endpoint", endpoint, *http,
                    "--curve-key", str(keys / "gateway.key_secret"), "--curve-clients", str(keys / "workers"), core=0)
        hosts.serve("b-workers", "b", *flags, "--role", "workers", "--workers", "1", "--endpoint", endpoint,
                    *curve_worker(0), core=0)
        hosts.serve("c", "c", *flags, "--workers", "1", *http, core=1)
        hosts.serve("d", "d", *flags, "--role", "workers", "--workers", "1", "--endpoint", endpoint,
                    *curve_worker(1), core=1)
        gateways = [f"{ADDRESSES[h]}:{hosts.http_port}" for h in GATEWAYS]
        for front, port in LB_PORTS.items():  # each logs its requests to its own .out file
            conf = tmp / f"haproxy-{port}.cfg"
            conf.write_text(render_haproxy_conf(self.settings, gateways, bind=f"127.0.0.1:{port}",
                                                stats_socket=str(self.lb_socket(front)), retry=front == RETRIES_ON))
            hosts.start(f"haproxy-{port}", "a", ["haproxy", "-db", "-f", str(conf)])

    def view(self) -> dict[str, dict]:
        """Each gateway's /health ({} when it does not answer)."""
        return {host: self.hosts.health(host, timeout=2) for host in GATEWAYS}

    def lb(self, front: str = RETRIES_ON) -> dict[str, str]:
        """A front's view of each gateway (gw1, gw2: UP, DOWN, ...); {} when it does not answer."""
        try:
            return self.hosts.lb_status(self.lb_socket(front))
        except OSError:
            return {}

    def missing(self) -> list[str]:
        """What keeps the fleet from being whole; [] when it is."""
        gaps = []
        for host, health in self.view().items():
            if health.get("status") != "ready":
                gaps.append(f"gateway {host}: {health.get('status', 'not answering')}")
            seen = by_id(health)
            for wid, (_, gateway) in WORKERS.items():
                if gateway == host and health and seen.get(wid, {}).get("state") != "up":
                    gaps.append(f"{wid}: {seen.get(wid, {}).get('state', 'unknown')} at {host}")
        for front in LB_PORTS:
            lb = self.lb(front)
            gaps += [f"HAProxy ({front}): {LB_NAMES[h]} {lb.get(LB_NAMES[h], 'unknown')}" for h in GATEWAYS
                     if lb.get(LB_NAMES[h]) != "UP"]
        return gaps

    def worker_state(self, wid: str) -> dict:
        """The worker as its gateway sees it ({} when unknown or the gateway does not answer)."""
        return by_id(self.hosts.health(WORKERS[wid][1], timeout=2)).get(wid, {})

    def worker_pid(self, wid: str) -> int:
        return self.hosts.pid(WORKERS[wid][0], WORKER_PROGRAM)

    def gateway_pid(self, host: str) -> int:
        return self.hosts.pid(GATEWAYS[host], GATEWAY_PROGRAM)

    def lifecycle_breaches(self) -> list[str]:
        """Lines in which a gateway (check_lifecycle on) logged a broken request lifecycle; the
        log outlives a gateway that was killed and restarted."""
        lines = []
        for serve in GATEWAYS.values():
            log = self.hosts.tmp / serve / "gateway.log"
            if log.exists():
                lines += [line for line in log.read_text().splitlines() if "request lifecycle broken" in line]
        return lines

    def fleet_counters(self) -> dict[str, dict]:
        """/health's `fleet` counters per gateway (since its last start)."""
        return {host: health.get("fleet", {}) for host, health in self.view().items()}
