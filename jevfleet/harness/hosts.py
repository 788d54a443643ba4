"""Several "hosts" on one machine: network namespaces on one bridge, each running parts of a
fleet (`jevfleet serve` in a role, HAProxy) under its own hostname, for the multi-host test and
the chaos run.

The first host holds the bridge; every other host is joined to it by a veth pair whose bridge end
lives in the first host. The namespaces are named `<prefix><pid><host>` (jevfleet/harness/netns.py
removes those of a run that died), so two runs never touch each other's. `remove()` stops every
process started here and deletes the namespaces; call it in a `finally`.
"""
from __future__ import annotations

import csv
import io
import json
import os
import shlex
import socket
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from client.net import http
from jevfleet.harness import netns
from jevfleet.harness.processes import stop_processes
from shared.config import PROJECT_ROOT


@dataclass
class Hosts:
    prefix: str  # namespaces are <prefix><pid><host>
    link: str  # short name of the veths (a Linux interface name has at most 15 characters)
    addresses: dict[str, str]  # host -> its address on the bridge (/24); the first host holds the bridge
    tmp: Path  # output of every process, run directories
    http_port: int = 8017  # where a gateway listens on its host
    tag: str = field(default_factory=lambda: str(os.getpid()))
    procs: dict[str, subprocess.Popen] = field(default_factory=dict)

    @property
    def hub(self) -> str:
        return next(iter(self.addresses))

    def ns(self, host: str) -> str:
        return f"{self.prefix}{self.tag}{host}"

    def veth(self, host: str) -> str:
        """The host's end of its veth pair; its bridge port in the hub is this + "p"."""
        return f"{self.link}{self.tag}{host}"

    def create(self) -> None:
        """The namespaces, the bridge and the veths; subprocess.CalledProcessError (with nothing
        left behind) where the machine does not allow them."""
        netns.remove_leftovers(self.prefix)
        bridge = f"{self.link}{self.tag}br"
        hub = self.ns(self.hub)
        try:
            for host in self.addresses:
                netns.add(self.ns(host))
            netns.sh("ip", "-n", hub, "link", "add", bridge, "type", "bridge")
            netns.sh("ip", "-n", hub, "addr", "add", f"{self.addresses[self.hub]}/24", "dev", bridge)
            netns.sh("ip", "-n", hub, "link", "set", bridge, "up")
            for host, addr in list(self.addresses.items())[1:]:
                port = self.veth(host) + "p"
                netns.sh("ip", "link", "add", self.veth(host), "netns", self.ns(host), "type", "veth", "peer", "name",
                         port, "netns", hub)
                netns.sh("ip", "-n", hub, "link", "set", port, "master", bridge, "up")
                netns.sh("ip", "-n", self.ns(host), "addr", "add", f"{addr}/24", "dev", self.veth(host))
                netns.sh("ip", "-n", self.ns(host), "link", "set", self.veth(host), "up")
        except subprocess.CalledProcessError:
            self.remove()
            raise

    def set_link(self, host: str, up: bool) -> None:
        """Cut (or restore) the host's only link to the others, as a pulled cable would."""
        netns.sh("ip", "-n", self.ns(host), "link", "set", self.veth(host), "up" if up else "down")

    def start(self, name: str, host: str, cmd: list[str], *, core: int | None = None) -> None:
        """`cmd` in host's namespace, with hostname host<host> (worker ids are <hostname>/wNN)."""
        pin = f"taskset -c {core} " if core is not None else ""
        shell = f"hostname host{host} && exec {pin}" + shlex.join(cmd)
        with (self.tmp / f"{name}.out").open("w") as out:
            self.procs[name] = subprocess.Popen(netns.exec_in(self.ns(host), "unshare", "--uts", "sh", "-c", shell),
                                                cwd=PROJECT_ROOT, stdout=out, stderr=subprocess.STDOUT)

    def serve(self, name: str, host: str, *args: str, core: int) -> None:
        """`jevfleet serve` (supervisord) with its run directory tmp/<name>."""
        self.start(name, host, [sys.executable, "-m", "jevfleet", "serve", "--run-dir", str(self.tmp / name), *args],
                   core=core)

    def health(self, host: str, timeout: float = 5) -> dict:
        """The /health body of the gateway on `host`, asked from the hub; {} when none answers."""
        def get() -> dict:
            try:
                return json.loads(http("GET", f"http://{self.addresses[host]}:{self.http_port}/health",
                                       timeout=timeout)[2])
            except (OSError, ValueError):
                return {}
        return netns.run_in(self.ns(self.hub), get)

    def metrics(self, host: str) -> str:
        url = f"http://{self.addresses[host]}:{self.http_port}/metrics"
        return netns.run_in(self.ns(self.hub), lambda: http("GET", url)[2].decode())

    def supervisorctl(self, name: str, *args: str) -> str:
        exe = Path(sys.executable).parent / "supervisorctl"
        out = subprocess.run([str(exe), "-c", str(self.tmp / name / "supervisord.conf"), *args],
                             capture_output=True, text=True, timeout=120)
        return out.stdout + out.stderr

    def pid(self, name: str, program: str) -> int:
        """The pid of supervisord's `program` in the `serve` started as `name`; 0 while it has none."""
        out = self.supervisorctl(name, "pid", program).strip()
        return int(out) if out.isdigit() else 0

    def lb_status(self, sock: Path) -> dict[str, str]:
        """HAProxy's view of each gateway (gw1, gw2, ...: UP, DOWN, ...) from its stats socket."""
        with socket.socket(socket.AF_UNIX) as s:
            s.connect(str(sock))
            s.sendall(b"show stat\n")
            raw = b"".join(iter(lambda: s.recv(65536), b"")).decode()
        rows = csv.DictReader(io.StringIO(raw.lstrip("# ")))
        return {r["svname"]: r["status"] for r in rows if r["svname"].startswith("gw")}

    def logs(self, tail: int = 1500) -> str:
        files = sorted(self.tmp.glob("*.out")) + sorted(self.tmp.glob("*/*.log"))
        return "".join(f"\n--- {p.relative_to(self.tmp)}\n{p.read_text()[-tail:]}" for p in files)

    def stop(self) -> None:
        stop_processes(self.procs.values(), timeout=60)

    def remove(self) -> None:
        """Stop what was started here, then delete the namespaces (and what still runs in them)."""
        self.stop()
        for host in self.addresses:
            netns.delete(self.ns(host))
