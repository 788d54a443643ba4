"""`jevfleet haproxy-conf`: the HAProxy configuration (conf/haproxy.cfg) for several gateways,
each with its own workers, behind one address.

Retries are on by default: a gateway that dies (SIGKILL, host gone) drops the requests it
held, and since a decision is a pure read HAProxy sends them again, to another gateway
(retry-on conn-failure, empty-response, junk-response; option redispatch; the failed connection
has marked the dead one down). Off, those requests fail with 502/503, which is what the
multi-host test compares against.
"""
from __future__ import annotations

from string import Template
from typing import Sequence

from shared.config import CONF_DIR, Settings

CHECK_MS = 500  # /health every half second; two failed checks (or one failed connection) take a gateway out
RETRY = ("    retries 3\n"
         "    retry-on conn-failure empty-response junk-response\n"
         "    option redispatch 1")
NO_RETRY = ("    retries 0\n"
            "    retry-on none")


def render_haproxy_conf(settings: Settings, gateways: Sequence[str], *, bind: str, stats_socket: str,
                        retry: bool = True) -> str:
    """gateways: ADDR:PORT of each gateway's HTTP listener; bind: ADDR:PORT HAProxy listens on."""
    if not gateways:
        raise ValueError("at least one gateway ADDR:PORT is needed")
    servers = "\n".join(f"    server gw{n} {addr} check" for n, addr in enumerate(gateways, 1))
    return Template((CONF_DIR / "haproxy.cfg").read_text()).substitute(
        bind=bind,
        stats_socket=stats_socket,
        timeout_s=int(settings.deadline_s) + 30,  # longer than a request may wait in a gateway
        check_ms=CHECK_MS,
        retry=RETRY if retry else NO_RETRY,
        servers=servers,
    )
