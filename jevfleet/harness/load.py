"""Client-side load for black-box tests and benchmarks: decision payloads, a closed loop of client
threads (each sends its next request when the previous one is answered), and what /health,
supervisord and /proc say about the fleet."""
from __future__ import annotations

import collections
import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from client.net import http
from jevfleet.harness.fleet import Fleet

QUESTION = "Does the customer want a refund?"


def decision(state: str, question: str = QUESTION) -> dict:
    return {"model": "jev-latest", "state": state, "questions": {"q": {"type": "noul", "instructions": question}}}


def states(n: int, tag: str = "", words: int = 0) -> list[str]:
    """n distinct short customer messages; `words` pads each with a long account of the case."""
    pad = " ".join(f"Earlier, on visit {k}, the customer described the delivery and the packaging in detail."
                   for k in range(words // 14))
    return [f"{tag}Ticket {i}: order #{1000 + i} arrived {['late', 'broken', 'early', 'twice'][i % 4]} "
            f"and the customer {['asks for money back', 'is happy', 'wants a new one', 'is angry'][i % 3]}. "
            + pad for i in range(n)]


@dataclass
class Outcome:
    index: int  # which payload
    status: int  # 0: the connection failed
    body: dict
    headers: dict
    started: float  # time.monotonic()
    ended: float


def post(url: str, payload: dict, index: int = 0, timeout: float = 90, api_key: str = "") -> Outcome:
    """One decision request; api_key, when given, goes as the Bearer token."""
    started = time.monotonic()
    auth = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        status, headers, raw = http("POST", url + "/v1/systemone", json.dumps(payload).encode(),
                                    {"Content-Type": "application/json", **auth}, timeout=timeout)
        body = json.loads(raw)
    except OSError as exc:  # reset, refused, timed out
        status, headers, body = 0, {}, {"error": repr(exc)}
    except ValueError:  # not our JSON: e.g. a load balancer's own error page
        body = {"error": raw[:200].decode("utf-8", "replace")}
    return Outcome(index, status, body, headers, started, time.monotonic())


def closed_loop(url: str, payloads: list[dict], clients: int, stop: threading.Event) -> list[Outcome]:
    """`clients` threads, each cycling through `payloads` (from its own offset) until `stop`."""
    outcomes: list[Outcome] = []

    def client(offset: int) -> None:
        i = offset
        while not stop.is_set():
            outcomes.append(post(url, payloads[i % len(payloads)], i % len(payloads)))
            i += 1

    with ThreadPoolExecutor(clients) as pool:
        for c in range(clients):
            pool.submit(client, c * len(payloads) // clients)
    return outcomes


class Clients:
    """`count` closed-loop clients in threads for the length of a with-block, client k sending
    payloads k, k + count, ...; a client pauses `pause_s` after a failure, so that failures count
    the time an outage lasts, not how fast a client spins on it. `enter`, when given, runs first in
    each client's thread (e.g. to move it into a network namespace)."""

    def __init__(self, url: str, payloads: list[dict], count: int, *, pause_s: float = 0.1, timeout: float = 60,
                 api_key: str = "", enter: Callable[[], None] | None = None) -> None:
        self.url, self.payloads, self.pause_s, self.timeout, self.api_key = url, payloads, pause_s, timeout, api_key
        self.enter = enter
        self.outcomes: list[Outcome] = []
        self.stop_event = threading.Event()
        self.threads = [threading.Thread(target=self._client, args=(k, count)) for k in range(count)]

    def _client(self, k: int, count: int) -> None:
        if self.enter:
            self.enter()
        i = k
        while not self.stop_event.is_set():
            outcome = post(self.url, self.payloads[i % len(self.payloads)], i, timeout=self.timeout,
                           api_key=self.api_key)
            self.outcomes.append(outcome)
            i += count
            if outcome.status != 200:
                self.stop_event.wait(self.pause_s)

    def __enter__(self) -> Clients:
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop_event.set()
        for t in self.threads:
            t.join()

    def answered(self) -> int:
        return sum(o.status == 200 for o in self.outcomes)

    def failures(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.status != 200]

    def describe_failures(self, since: float) -> str:
        """What the clients saw, by status and error, and when (seconds after `since`)."""
        kinds = collections.Counter((o.status, str(o.body.get("error", o.body))[:60]) for o in self.failures())
        ends = [o.ended - since for o in self.failures()]
        span = f" between {min(ends):.2f} and {max(ends):.2f} s" if ends else ""
        return f"{dict(kinds)}{span}"


def noul(outcome: Outcome) -> float:
    return outcome.body["answers"]["q"]["noul"]


def by_id(health: dict) -> dict[str, dict]:
    """A /health body's workers by id."""
    return {w["id"]: w for w in health.get("workers", [])}


def workers(fleet: Fleet) -> dict[str, dict]:
    """/health's workers by id."""
    return by_id(fleet.health()[1])


def served_by(fleet: Fleet) -> dict[str, int]:
    return {wid: w["served"] for wid, w in workers(fleet).items()}


def rss_kb(pid: int) -> int:
    """Resident memory of a process, from /proc."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise ValueError(f"no VmRSS for pid {pid}")


def program_pid(fleet: Fleet, name: str) -> int:
    """The pid of supervisord's program `name` (gateway, worker:worker_00, ...)."""
    return int(fleet.supervisorctl("pid", name).strip())
