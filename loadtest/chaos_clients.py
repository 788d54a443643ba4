"""The chaos run's clients and what each attempt came to.

Retry policy (the one a careful client of a pure-read API follows): a request is sent until a
200 comes back. A 429 or 503 carrying Retry-After (the documented refusals) is sent again after
that many seconds, at most RETRY_CAP_S; anything else — a connection error, a status without
Retry-After, another status — is undocumented, counted as such, and sent again after
UNDOCUMENTED_PAUSE_S. A request still unanswered when the run gives up (`give_up_at`) is lost.

Every 200 is compared with the reference answer; a difference is a mismatch and the request is
still counted as answered (it must not be sent again to hide it).

The clients go through one HAProxy front at a time (`front`, switched by the run between phases);
each attempt records the front it went through, the gateway that answered, and the Retry-After
it was given, so the report can tell the phases apart and check that every refusal was waited out.
"""
from __future__ import annotations

import collections
import http.client
import itertools
import json
import re
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Collection

from client.net import retry_after
from jevfleet.harness.load import Outcome, post
from loadtest.chaos_requests import Request, same

RETRY_CAP_S = 10.0
UNDOCUMENTED_PAUSE_S = 1.0
SAME, DIFFERENT, DISCONNECTED = "200 same as the reference", "200 DIFFERENT from the reference", "client disconnected"
DIRECT = "direct"  # an attempt's front when it went straight to a gateway (the disconnecting client's first)


@dataclass
class Attempt:
    index: int
    client: str
    outcome: str  # SAME, DIFFERENT, "429 with Retry-After", ..., "undocumented: ..."
    started: float  # time.monotonic()
    ended: float
    gateway: str = ""  # x-jevfleet-gateway: who answered
    front: str = ""  # the HAProxy front it went through (chaos_fleet.LB_PORTS), or DIRECT
    retry_after: float | None = None  # the Retry-After it was given, as sent


def classify(outcome: Outcome, reference: dict) -> tuple[str, float]:
    """What one attempt came to, and how long to wait before sending it again (0: answered)."""
    if outcome.status == 200:
        return (SAME if same(outcome.body, reference) else DIFFERENT), 0.0
    after = retry_after(outcome.headers)
    if outcome.status in (429, 503) and after is not None and after >= 1:
        return f"{outcome.status} with Retry-After", min(after, RETRY_CAP_S)
    what = f"status {outcome.status}" if outcome.status else "connection error"
    detail = str(outcome.body.get("error", outcome.body.get("detail", "")))
    detail = " ".join(re.sub(r"<[^>]*>", " ", detail).split())[:80]  # HAProxy's own pages are HTML
    return f"undocumented: {what} {detail}".rstrip(), UNDOCUMENTED_PAUSE_S


@dataclass
class Clients:
    """Closed-loop clients over the fixed requests, in turn (request n of the run is
    reqs[n % len(reqs)]), until stopped or `max_requests` have been taken."""

    urls: dict[str, str]  # HAProxy's fronts by name
    front: str  # the one every new attempt goes through
    reqs: list[Request]
    reference: list[dict]
    count: int
    max_requests: int
    enter: Callable[[], None] = lambda: None  # run by each client thread first (into the clients' namespace)
    give_up_at: float = float("inf")  # time.monotonic() after which an unanswered request is lost
    attempts: list[Attempt] = field(default_factory=list)
    taken: int = 0
    answered: int = 0
    lost: list[int] = field(default_factory=list)
    mismatches: list[tuple[int, dict]] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _next: itertools.count = field(default_factory=itertools.count)
    _threads: list[threading.Thread] = field(default_factory=list)

    def start(self) -> None:
        self._threads = [threading.Thread(target=self._client, args=(f"c{k}",), daemon=True) for k in range(self.count)]
        for t in self._threads:
            t.start()

    def stop(self, settle_s: float) -> None:
        """No new requests; those being sent keep being retried for up to settle_s."""
        self.give_up_at = time.monotonic() + settle_s
        self._stop.set()
        for t in self._threads:
            t.join()

    def _take(self) -> Request | None:
        with self._lock:
            if self._stop.is_set() or self.taken >= self.max_requests:
                return None
            self.taken += 1
            return self.reqs[next(self._next) % len(self.reqs)]

    def _client(self, name: str) -> None:
        self.enter()
        while (req := self._take()) is not None:
            self.settle(req, name)

    def record(self, attempt: Attempt) -> None:
        with self._lock:
            self.attempts.append(attempt)

    def settle(self, req: Request, client: str, first: Outcome | None = None) -> None:
        """Send `req` until answered (`first`: an attempt already made); lost past give_up_at."""
        outcome, front = first, DIRECT
        while True:
            if outcome is None:
                front = self.front
                outcome = post(self.urls[front], req.body, req.index, timeout=120)
            kind, pause = classify(outcome, self.reference[req.index])
            self.record(Attempt(req.index, client, kind, outcome.started, outcome.ended,
                                outcome.headers.get("x-jevfleet-gateway", ""), front, retry_after(outcome.headers)))
            if outcome.status == 200:
                with self._lock:
                    self.answered += 1
                    if kind == DIFFERENT:
                        self.mismatches.append((req.index, outcome.body))
                return
            if time.monotonic() + pause > self.give_up_at:
                with self._lock:
                    self.lost.append(req.index)
                return
            time.sleep(pause)  # the client's back-off (Retry-After), not synchronisation
            outcome = None

    def disconnect(self, req: Request, host: str, port: int, after_s: float) -> str:
        """Send `req` straight to a gateway and close the connection after `after_s` without
        reading the answer; then send it again until answered, as the client would (through the
        front in use). What the first attempt came to: DISCONNECTED, or what it got before."""
        with self._lock:
            self.taken += 1
        conn = http.client.HTTPConnection(host, port, timeout=after_s)
        started = time.monotonic()
        try:
            conn.request("POST", "/v1/systemone", json.dumps(req.body).encode(), {"Content-Type": "application/json"})
            resp = conn.getresponse()
            status, headers, raw = resp.status, dict(resp.headers), resp.read()
        except TimeoutError:
            status = -1
        except OSError as exc:
            status, headers, raw = 0, {}, json.dumps({"error": repr(exc)}).encode()
        finally:
            conn.close()
        if status == -1:
            self.record(Attempt(req.index, "disconnecting", DISCONNECTED, started, time.monotonic(), front=DIRECT))
            self.settle(req, "disconnecting")
            return DISCONNECTED
        try:
            body = json.loads(raw)
        except ValueError:
            body = {"error": raw[:200].decode("utf-8", "replace")}
        first = Outcome(req.index, status, body, headers, started, time.monotonic())
        self.settle(req, "disconnecting", first)
        return classify(first, self.reference[req.index])[0]

    def snapshot(self) -> list[Attempt]:
        """The attempts made so far, in the order they ended."""
        with self._lock:
            return list(self.attempts)

    def tally(self, fronts: Collection[str] | None = None) -> dict[str, int]:
        """Attempts by outcome: all of them, or those through one of `fronts`."""
        return dict(collections.Counter(a.outcome for a in self.snapshot()
                                        if fronts is None or a.front in fronts).most_common())

    def refusals(self, status: int = 429) -> dict[str, object]:
        """The refusals of `status` with Retry-After: how many, their Retry-After values, and
        whether the client waited each out before sending the request again."""
        attempts = self.snapshot()
        kind = f"{status} with Retry-After"
        waits = collections.Counter(a.retry_after for a in attempts if a.outcome == kind)
        honoured = early = 0
        last: dict[str, Attempt] = {}  # each client sends one request at a time, in order
        for a in attempts:
            before = last.get(a.client)
            if before is not None and before.outcome == kind and before.index == a.index:
                waited = a.started - before.ended
                if waited >= min(before.retry_after, RETRY_CAP_S) - 0.01:
                    honoured += 1
                else:
                    early += 1
            last[a.client] = a
        return {"count": sum(waits.values()), "retry_after_s": {f"{k:g}": n for k, n in sorted(waits.items())},
                "retried_after_waiting": honoured, "retried_early": early}
