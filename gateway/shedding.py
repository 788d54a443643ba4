"""Load shedding at the door: when every worker's queue is full, a decision request is refused
with 429 before its body is read, parsed or tokenized — the cheapest possible answer, so an
overload costs the gateway little. The request path asks again once the body is validated, before
it waits its turn for the tokenizer pool (queues fill while a burst is being parsed), and again,
precisely, at submit."""
from __future__ import annotations

from aiohttp import web

from gateway.errors import overloaded
from gateway.fleet import Fleet


def shed_when_full(fleet_key: web.AppKey, path: str):
    """Middleware refusing POST `path` while app[fleet_key].refusal_when_full() says so; it
    runs inside the error middleware (which renders the ApiError) and after the API key check."""

    @web.middleware
    async def shed(request: web.Request, handler) -> web.StreamResponse:
        if request.method == "POST" and request.path == path:
            refuse_if_full(request.app[fleet_key])
        return await handler(request)

    return shed


def refuse_if_full(fleet: Fleet) -> None:
    """Raise the 429 at once if no worker's queue could take even the smallest request."""
    refusal = fleet.refusal_when_full()
    if refusal is not None:
        raise overloaded(refusal.status, str(refusal), retry_after=refusal.retry_after)
