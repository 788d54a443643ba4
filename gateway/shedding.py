"""Load shedding at the door: when every worker's queue is full, a decision request is refused
with 429 before its body is read, parsed or tokenized — the cheapest possible answer, so an
overload costs the gateway little. The request path checks again, precisely, at submit."""
from __future__ import annotations

from aiohttp import web

from gateway.errors import overloaded


def shed_when_full(fleet_key: web.AppKey, path: str):
    """Middleware refusing POST `path` while app[fleet_key].refusal_when_full() says so; it
    runs inside the error middleware (which renders the ApiError) and after the API key check."""

    @web.middleware
    async def shed(request: web.Request, handler) -> web.StreamResponse:
        if request.method == "POST" and request.path == path:
            refusal = request.app[fleet_key].refusal_when_full()
            if refusal is not None:
                raise overloaded(refusal.status, str(refusal), retry_after=refusal.retry_after)
        return await handler(request)

    return shed
