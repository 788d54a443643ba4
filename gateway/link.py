"""The gateway's end of the wire: one ZeroMQ ROUTER that every worker connects to, and its monitor.

Invariant: only decoded messages leave this module and only encoded ones enter the socket; a
frame that does not decode is logged and dropped, never passed on. A send never waits: a peer
the ROUTER cannot reach is reported to the caller's `unreachable` callback, which is how a lost
connection becomes a lost worker (gateway/membership.py).

Identity: each worker process's ROUTER identity is its own (shared/messages.routing_identity: id,
pid, random bytes), so two processes claiming one worker id are both heard and membership decides
(gateway/membership.py: the second is refused). No ROUTER_HANDOVER: identities never repeat, and a
connection that dropped and came back keeps its own. ZMTP heartbeats close the connection of a peer
that vanished without closing it (a host or a link gone) once it is silent for dead_after_s.
"""
from __future__ import annotations

import logging
from typing import Callable

import zmq
import zmq.asyncio

from shared import curve
from shared.config import Settings
from shared.messages import Message, decode, encode

log = logging.getLogger("jevfleet.fleet")

class BindError(OSError):
    """The ROUTER could not bind its endpoint: an OSError like the HTTP port's, so the gateway
    refuses to start with the reason (gateway/app.run_gateway_process, shared/refusal.py)."""


Unreachable = Callable[[BaseException], object]  # told why a send to a peer failed


class Link:
    """The ROUTER socket (CURVE when keys are configured) bound at settings.zmq_endpoint."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.endpoint = settings.zmq_endpoint
        self._keys = curve.gateway_keys(settings)  # raises CurveError now, not at the first worker
        self._zctx = zmq.asyncio.Context()
        self._sock: zmq.asyncio.Socket | None = None
        self._monitor: zmq.asyncio.Socket | None = None
        self._auth = None

    def open(self) -> None:
        """Bind the ROUTER; from now on workers can connect."""
        sock = self._zctx.socket(zmq.ROUTER)
        # No ROUTER_HANDOVER: with it a newcomer claiming a live worker's id took over its
        # connection, and the live worker's messages were dropped from then on.
        sock.setsockopt(zmq.HEARTBEAT_IVL, max(1, round(self.settings.heartbeat_s * 1000)))
        sock.setsockopt(zmq.HEARTBEAT_TIMEOUT, max(1, round(self.settings.dead_after_s * 1000)))
        sock.setsockopt(zmq.ROUTER_MANDATORY, 1)  # sending to a vanished worker raises
        sock.setsockopt(zmq.LINGER, 0)
        if self._keys is not None:
            self._keys.apply(sock)
            self._auth = curve.authenticator(self._zctx, self.settings)
        self._monitor = sock.get_monitor_socket(zmq.EVENT_DISCONNECTED)
        try:
            sock.bind(self.endpoint)
        except zmq.ZMQError as exc:  # in use, not this host's, malformed: the gateway refuses to start
            self._monitor.close(linger=0)
            sock.close()
            raise BindError(f"the gateway cannot bind the workers' endpoint {self.endpoint}: {exc}") from exc
        self._sock = sock

    def close(self) -> None:
        if self._sock is not None:
            self._sock.disable_monitor()
            self._monitor.close(linger=0)
            self._sock.close()
        if self._auth is not None:
            self._auth.stop()
        self._zctx.term()

    async def receive(self) -> tuple[bytes, Message]:
        """The next message that decodes, with the sender's ROUTER identity."""
        while True:
            identity, frame = (await self._sock.recv_multipart())[-2:]
            try:
                return identity, decode(frame)
            except ValueError as exc:
                log.warning("dropped a bad frame: %s", exc)

    async def disconnected(self) -> None:
        """Returns when some peer's connection dropped; the monitor does not say whose."""
        await self._monitor.recv_multipart()

    def send(self, identity: bytes, msg: Message, unreachable: Unreachable) -> bool:
        """Send without waiting; False (and `unreachable` called) if ZeroMQ refused it: the
        ROUTER refuses a peer whose connection is gone, or whose queue is full (stuck). A send
        queued behind an earlier pending one calls `unreachable` later if it fails."""
        fut = self._sock.send_multipart([identity, encode(msg)], flags=zmq.NOBLOCK)
        if not fut.done():  # behind an earlier pending send
            fut.add_done_callback(lambda f: f.cancelled() or f.exception() is None or unreachable(f.exception()))
            return True
        if fut.exception() is None:
            return True
        unreachable(fut.exception())
        return False
