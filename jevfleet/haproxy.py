"""`jevfleet haproxy-conf`: the HAProxy configuration (conf/haproxy.cfg) for several gateways,
each with its own workers, behind one address.

Retries are on by default: a gateway that dies (SIGKILL, host gone) drops the requests it
held, and since a decision is a pure read HAProxy sends them again, to another gateway
(retry-on conn-failure, empty-response, junk-response; option redispatch; the failed connection
has marked the dead one down). Off, those requests fail with 502/503, which is what the
multi-host test compares against.

With `discover`, the one gateway given is a DNS name standing for all of them (on Kubernetes, the
headless Service of the fleet's units, deploy/kubernetes/): HAProxy resolves it every second and
fills up to `discover` server slots with its addresses, so units that come, go or move need no
new configuration. HAProxy does not apply resolv.conf's search list; a name without a dot is
qualified here with its first search domain, the one a pod's own lookups try first.
"""
from __future__ import annotations

from pathlib import Path
from string import Template
from typing import Sequence

from shared.config import CONF_DIR, Settings

CHECK_MS = 500  # /health every half second; two failed checks (or one failed connection) take a gateway out
RETRY = ("    retries 3\n"
         "    retry-on conn-failure empty-response junk-response\n"
         "    option redispatch 1")
NO_RETRY = ("    retries 0\n"
            "    retry-on none")
# Name servers from resolv.conf; the name is asked again every second, and the larger payload lets
# one answer carry many units' addresses. hold obsolete: a unit whose address is missing from one
# answer keeps its slot for 30 s. HAProxy's default is 0 s, so one answer without it would empty the
# slot and send the states hashed there to another unit for a second: the likely cause of the
# Kubernetes test's same-state check failing 1 run in 3 with no health check failing. Whether a unit
# takes requests is the health checks' call (out within a second); DNS only adds and removes slots.
# hold timeout: when the name server does not answer, the slots keep their last addresses for 5
# minutes (HAProxy's default is 30 s, after which every slot went into maintenance and the front had
# no server at all while it was silent: make test's Kubernetes test, 2026-12-03, aardvark-dns out of
# the front's reach for about 2 minutes after a pod was deleted; the cause there was the test network's
# bridge changing its MAC address, fixed in tests/podman_kube.create_network, but a name server can
# fall silent in a cluster too).
RESOLVERS = ("\nresolvers dns\n"
             "    parse-resolv-conf\n"
             "    accepted_payload_size 8192\n"
             "    timeout resolve 1s\n"
             "    timeout retry 1s\n"
             "    hold obsolete 30s\n"
             "    hold timeout 300s\n")


def qualified(name: str, resolv_conf: Path = Path("/etc/resolv.conf")) -> str:
    """`name`, or name.<first search domain> when it has no dot and resolv.conf lists a search domain."""
    if "." in name or not resolv_conf.is_file():
        return name
    for line in resolv_conf.read_text().splitlines():
        words = line.split()
        if len(words) > 1 and words[0] == "search":
            return f"{name}.{words[1]}"
    return name


def render_haproxy_conf(settings: Settings, gateways: Sequence[str], *, bind: str, stats_socket: str,
                        retry: bool = True, discover: int = 0) -> str:
    """gateways: ADDR:PORT of each gateway's HTTP listener, or with discover > 0 a single NAME:PORT
    whose addresses are the gateways; bind: ADDR:PORT HAProxy listens on."""
    if not gateways:
        raise ValueError("at least one gateway ADDR:PORT is needed")
    if discover:
        if len(gateways) != 1:
            raise ValueError("--discover takes one NAME:PORT, the DNS name of every gateway")
        name, _, port = gateways[0].rpartition(":")
        servers = (f"    server-template gw {discover} {qualified(name)}:{port} check resolvers dns "
                   "init-addr none resolve-prefer ipv4")
    else:
        servers = "\n".join(f"    server gw{n} {addr} check" for n, addr in enumerate(gateways, 1))
    return Template((CONF_DIR / "haproxy.cfg").read_text()).substitute(
        bind=bind,
        stats_socket=stats_socket,
        timeout_s=int(settings.deadline_s) + 30,  # longer than a request may wait in a gateway
        check_ms=CHECK_MS,
        retry=RETRY if retry else NO_RETRY,
        servers=servers,
        resolvers=RESOLVERS if discover else "",
    )
