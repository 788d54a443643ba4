"""Load shedding at the door: when every worker's queue is full — counting as full the places that
requests already past the door will take — a decision request is refused with 429 before its body
is read, parsed or tokenized: the cheapest possible answer, so an overload or a burst costs the
gateway little and the refused learn it at once. The request path asks again once the body is
validated, before it waits its turn for the tokenizer pool, and again, precisely, at submit."""
from __future__ import annotations

from aiohttp import web

from gateway.fleet import Fleet


DOOR = "door"  # request key: the Door the request passed, until it holds its own place in a queue


class Door:
    """Requests past the door that do not yet hold a place in a worker's queue (reading, parsing,
    tokenizing). Each counts as a place taken, so a burst is told 429 at the door as soon as the
    places are spoken for, instead of after parsing and waiting for the tokenizer."""

    def __init__(self) -> None:
        self.passing = 0

    def enter(self, request: web.Request) -> None:
        self.passing += 1
        request[DOOR] = self


def queued(request: web.Request) -> None:
    """The request now holds its own place in a queue (or is done): it no longer reserves one."""
    door = request.pop(DOOR, None)
    if door is not None:
        door.passing -= 1


def shed_when_full(fleet_key: web.AppKey, path: str):
    """Middleware refusing POST `path` while app[fleet_key].refusal_when_full() says so, counting
    the requests already past it; it runs inside the error middleware (which renders the
    Unavailable) and after the API key check."""
    door = Door()

    @web.middleware
    async def shed(request: web.Request, handler) -> web.StreamResponse:
        if request.method != "POST" or request.path != path:
            return await handler(request)
        refuse_if_full(request.app[fleet_key], reserved=door.passing)
        door.enter(request)
        try:
            return await handler(request)
        finally:
            queued(request)

    return shed


def refuse_if_full(fleet: Fleet, reserved: int = 0) -> None:
    """Raise the 429 (an Unavailable, which the error middleware answers) at once if no worker's
    queue could take even the smallest request, or every free place is reserved."""
    refusal = fleet.refusal_when_full(reserved)
    if refusal is not None:
        raise refusal
