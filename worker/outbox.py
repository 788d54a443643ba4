"""Messages for the gateway that ZeroMQ cannot take yet, held in order until it can.

Invariant: an answer (Result, Error) or a Drain given to the outbox is sent, in the order given,
however long the gateway stops reading; nothing is dropped. The outbox is bounded: once it holds
`limit` messages the worker stops taking results from its scheduler, whose next send then blocks,
so a stalled gateway stops the worker's computing instead of growing its memory. Status beats are
the exception: at most one waits, the newest (a newer one replaces it: it says the same, newer),
and it goes before every held answer as soon as ZeroMQ takes a message. A gateway hears that a
worker is alive only from its beats; one that reads a backlog of answers after a stall must hear
beats too, or it takes a busy worker for a silent one and sends its running work elsewhere.
"""
from __future__ import annotations

import logging
import time
from collections import deque

import zmq

log = logging.getLogger("jevfleet.worker")

LIMIT = 1024  # held messages; ZeroMQ's own queue (SNDHWM, 1000) and the socket buffer come before


class Outbox:
    def __init__(self, sock: zmq.Socket, limit: int = LIMIT) -> None:
        self.sock = sock
        self.limit = limit
        self.held: deque[bytes] = deque()
        self.beat: bytes | None = None  # the newest status beat ZeroMQ has not taken yet
        self.most_held = 0  # the high-water mark, for the log

    @property
    def full(self) -> bool:
        return len(self.held) >= self.limit

    @property
    def waiting(self) -> bool:
        """Is anything (an answer or a beat) waiting for ZeroMQ to take it? Then poll for POLLOUT."""
        return bool(self.held) or self.beat is not None

    def send(self, frame: bytes) -> None:
        """Send now if ZeroMQ takes it (and nothing is held before it), else hold it."""
        self.held.append(frame)
        self.flush()

    def send_status(self, frame: bytes) -> None:
        """A beat: sent now if ZeroMQ takes it, else it waits (replacing an older one) and goes
        first at the next flush, ahead of held answers."""
        self.beat = frame
        self.flush()

    def flush_for(self, seconds: float) -> bool:
        """At exit: wait up to `seconds` for the gateway to take what is held; True if it did."""
        deadline = time.monotonic() + seconds
        while self.held and time.monotonic() < deadline:
            if self.sock.poll(int((deadline - time.monotonic()) * 1000) + 1, zmq.POLLOUT):
                self.flush()
        return not self.held

    def flush(self) -> None:
        """Send the waiting beat, then held messages oldest first, until ZeroMQ refuses one (call
        again on POLLOUT)."""
        try:
            if self.beat is not None:
                self.sock.send(self.beat, zmq.NOBLOCK)
                self.beat = None
            while self.held:
                self.sock.send(self.held[0], zmq.NOBLOCK)
                self.held.popleft()
        except zmq.Again:
            if len(self.held) > self.most_held:
                if not self.most_held:
                    log.warning("gateway not reading: holding results until it does")
                self.most_held = len(self.held)
            return
        if self.most_held:
            log.info("gateway reading again: every held message sent (at most %d were held)", self.most_held)
            self.most_held = 0
