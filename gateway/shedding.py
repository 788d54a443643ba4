"""Load shedding at the door: when every worker's queue is full — counting as full the places that
requests already past the door will take — a decision request is refused with 429 before its body
is read, parsed or tokenized: the cheapest possible answer, so an overload or a burst costs the
gateway little and the refused learn it at once. The request path asks again once the body is
in, before it takes a place, again once the body is validated, before it waits its turn for the
tokenizer pool, and again, precisely, at submit.

Invariant: the door's PASSING count is exactly the requests whose body is all in and that do not yet
hold a place in a worker's queue (parsing, validating, tokenizing); each is a place taken. A
request still receiving its body (counted as RECEIVING) takes no place, so clients that are slow to
send, or stop sending, never keep one that has sent its whole request from being served; each
is bounded in time and bytes by gateway/reading.py, and all of them together in bytes by its
BodyBudget, which this door asks after the 429 check: a 503 when the bodies arriving hold its cap.
"""
from __future__ import annotations

from aiohttp import web

from gateway.fleet import Fleet
from gateway.reading import BodyBudget

RECEIVING, PASSING = "receiving", "passing"
AT_DOOR = "at_door"  # request key: RECEIVING or PASSING while the door counts the request there


class Door:
    """Where the requests past the door are until they hold a place in a queue (or are done)."""

    def __init__(self, fleet: Fleet) -> None:
        self.fleet = fleet
        # RECEIVING: headers in, body still coming, no place taken; PASSING: body in, a place taken
        self.counts = {RECEIVING: 0, PASSING: 0}

    def arrive(self, request: web.Request) -> None:
        """The headers are in: 429 now if no place is left (the body is not read), else count it
        as receiving its body."""
        refuse_if_full(self.fleet, reserved=self.counts[PASSING])
        self._move(request, RECEIVING)

    def received(self, request: web.Request) -> None:
        """The body is in: from now on it takes a place, or it is told 429 if none is left."""
        if request.get(AT_DOOR) != RECEIVING:
            return  # not a request the door counts (another path)
        self._move(request, None)
        refuse_if_full(self.fleet, reserved=self.counts[PASSING])
        self._move(request, PASSING)

    def leave(self, request: web.Request) -> None:
        """The request holds its own place in a queue now, or is done: the door counts it no more."""
        self._move(request, None)

    def describe(self) -> dict[str, int]:
        """For /health: how many requests are receiving their body, and how many are passing."""
        return dict(self.counts)

    def _move(self, request: web.Request, to: str | None) -> None:
        held = request.pop(AT_DOOR, None)
        if held is not None:
            self.counts[held] -= 1
        if to is not None:
            self.counts[to] += 1
            request[AT_DOOR] = to


DOOR = web.AppKey("door", Door)
BODY_BUDGET = web.AppKey("body_budget", BodyBudget)


def received(request: web.Request) -> None:
    """Called by the request path as soon as the body is read: see Door.received."""
    request.app[DOOR].received(request)


def queued(request: web.Request) -> None:
    """The request now holds its own place in a queue (or is done): it no longer reserves one."""
    request.app[DOOR].leave(request)


def shed_when_full(path: str):
    """Middleware letting POST `path` through app[DOOR] (the 429 of a full fleet, before the body
    is read); it runs inside the error middleware (which renders the Unavailable) and after the
    API key check."""

    @web.middleware
    async def shed(request: web.Request, handler) -> web.StreamResponse:
        if request.method != "POST" or request.path != path:
            return await handler(request)
        door, budget = request.app[DOOR], request.app[BODY_BUDGET]
        door.arrive(request)
        try:
            budget.take(request)  # 503 when the bodies arriving hold body_bytes_in_flight
            return await handler(request)
        finally:
            door.leave(request)
            budget.give_back(request)

    return shed


def refuse_if_full(fleet: Fleet, reserved: int = 0) -> None:
    """Raise the 429 (an Unavailable, which the error middleware answers) at once if no worker's
    queue could take even the smallest request, or every free place is reserved."""
    refusal = fleet.refusal_when_full(reserved)
    if refusal is not None:
        raise refusal
