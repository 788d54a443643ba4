"""A request off the wire, bounded in bytes and in time, so a slow or silent client costs a
connection for a while and nothing more.

Invariant: no connection waits for a request's headers longer than header_timeout_s, and no
request waits for its body longer than body_timeout_s after its headers; no body is held past
max_body_bytes (+ BODY_SLACK for a compressed form; gateway/body.py bounds the decompressed bytes);
the bodies arriving at once never hold more than body_bytes_in_flight (BodyBudget).

What aiohttp provides is used as it is: its keep-alive timer, armed when a connection opens and
again after each answer, closes a connection still waiting for a whole request line and headers
when it fires (data arriving does not postpone it), so keepalive_timeout = header_timeout_s is
the header timeout. It has nothing that bounds the time a body takes (read_bufsize only sizes the
buffer at which reading pauses; handler_cancellation acts when the client goes away, not when it
stalls): read_within does that here.
"""
from __future__ import annotations

import asyncio
from typing import Any

from aiohttp import web

from gateway.errors import bodies_full, body_timeout, too_large
from shared.config import Settings

# Headroom over the body limit for the compressed form of an incompressible body; the limit
# itself is enforced on the decompressed bytes (gateway/body.py).
BODY_SLACK = 64 * 1024


def server_options(settings: Settings) -> dict[str, Any]:
    """aiohttp's server options for the gateway (web.run_app, or a test server's start_server)."""
    # auto_decompress: aiohttp must hand us compressed bodies as they are: it would answer zstd with
    # a text/plain 400 and inflate gzip without our size limit. gateway/body.py decompresses, bounded.
    return {"auto_decompress": False, "keepalive_timeout": settings.header_timeout_s}


def client_max_size(settings: Settings) -> int:
    """The most bytes aiohttp reads of one body before it refuses it (our 413)."""
    return settings.max_body_bytes + BODY_SLACK


async def read_within(request: web.Request, *, limit: int, timeout_s: float) -> bytes:
    """The whole body, or 413 past the limit, or 408 (connection closed after it) once timeout_s
    have passed since this was called: the headers' arrival, for the request path."""
    try:
        async with asyncio.timeout(timeout_s):
            return await request.read()
    except web.HTTPRequestEntityTooLarge:
        raise too_large(limit) from None
    except TimeoutError:
        raise body_timeout(timeout_s) from None


SMALL_BODY_BYTES = 64 * 1024  # an upload of at most this (declared) may use the whole body budget
BODY_BYTES = "body_bytes"  # request key: the bytes its body holds in the budget


class BodyBudget:
    """The bytes of request bodies the gateway holds at once, all connections together: each
    upload holds, from its headers until its answer, what it declares (Content-Length), or the most
    a body may be when it declares nothing (chunked), and the bytes it held are given back with its
    answer. Past the cap a new upload gets 503 with Retry-After before a byte of its body is read.
    Uploads over SMALL_BODY_BYTES may together hold three quarters of it, so the last quarter
    always lets small requests in: many large slow uploads stop neither memory nor the others."""

    def __init__(self, cap: int, largest: int) -> None:
        """cap: body_bytes_in_flight; largest: the most bytes one body may hold (client_max_size)."""
        if largest > self.large_cap(cap):
            raise ValueError(f"body_bytes_in_flight {cap} cannot hold one body of max_body_bytes: three quarters "
                             f"of it must be at least {largest} (set it to {-(-largest * 4 // 3)} or more)")
        self.cap, self.largest, self.in_flight = cap, largest, 0

    @staticmethod
    def large_cap(cap: int) -> int:
        return cap - cap // 4

    def take(self, request: web.Request) -> None:
        """Hold the bytes this request's body may take, or raise the 503 (gateway/errors.bodies_full)."""
        declared = request.content_length
        need = self.largest if declared is None else min(declared, self.largest)
        limit = self.cap if need <= SMALL_BODY_BYTES else self.large_cap(self.cap)
        if self.in_flight + need > limit:
            raise bodies_full(self.in_flight, self.cap)
        self.in_flight += need
        request[BODY_BYTES] = need

    def give_back(self, request: web.Request) -> None:
        self.in_flight -= request.pop(BODY_BYTES, 0)
