"""Locust users that ask decision questions, one user class per kind of server.

    locust -f loadtest/locustfile.py --host http://127.0.0.1:8017 --workload W2 JevfleetUser

Each user is a closed-loop client (no think time): it posts the next request of the workload
(one shared sequence for all users, so W3's state/question order holds), reads the answer and
checks it (loadtest/validate.py). A fresh workload (loadtest/fresh.py) never repeats: request k
of a run is its item --start + k, and the sweep gives every run its own start. Outcomes, as Locust records them:
  "answer"  a response; a failure when the status is not 200 or the body is not a valid answer.
            Its response length is set to the number of questions answered (0 for a failure),
            so the entry's total content length counts answers per question (W4 asks 20 a request)
  "shed"    429/503: the server refused work it could not take in time; counted apart from
            errors, and the user waits the Retry-After (at most 5 s) like the SDK does
"""
from __future__ import annotations

import itertools
import time
from functools import lru_cache

from locust import FastHttpUser, constant, events, task

from client.net import retry_wait
from loadtest import fresh, workloads
from loadtest.protocols import PROTOCOLS, Protocol
from loadtest.validate import InvalidAnswer
from shared.config import Settings
from shared.profiles import Profile, load_profile

SHED_STATUSES = (429, 503)
MAX_RETRY_WAIT_S = 5.0

_sequence = itertools.count()
DEFAULT_PROFILE = Settings.model_fields["default_profile"].default


@events.init_command_line_parser.add_listener
def _options(parser) -> None:
    parser.add_argument("--workload", default="W1", choices=fresh.names(),
                        help="which workload to send (loadtest/workloads.json, or a fresh one: loadtest/fresh.py)")
    parser.add_argument("--start", type=int, default=0, help="a fresh workload's first item (the sweep sets it)")
    parser.add_argument("--model-profile", default=DEFAULT_PROFILE,
                        help="model profile used to render prompts for the baselines")


@lru_cache(maxsize=None)
def _profile(name: str) -> Profile:
    return load_profile(name)


class DecisionUser(FastHttpUser):
    """One request per loop, in the format of `protocol` (loadtest/protocols.py)."""

    abstract = True
    wait_time = constant(0)
    network_timeout = 300.0
    connection_timeout = 30.0
    protocol: Protocol

    def on_start(self) -> None:
        options = self.environment.parsed_options
        self.workload = getattr(options, "workload", "W1")
        self.start = getattr(options, "start", 0)
        self.items = () if self.workload in fresh.FRESH else workloads.load(self.workload)
        self.profile = _profile(getattr(options, "model_profile", DEFAULT_PROFILE))

    @task
    def decide(self) -> None:
        k = next(_sequence)
        item = fresh.item(self.workload, self.start + k) if not self.items else self.items[k % len(self.items)]
        body = self.protocol.body(self.profile, item)
        with self.client.post(self.protocol.path, json=body, name="answer", catch_response=True) as resp:
            if resp.status_code in SHED_STATUSES:
                resp.request_meta["name"] = "shed"
                resp.success()
                wait = retry_wait(resp.headers, most=MAX_RETRY_WAIT_S)
            elif resp.status_code != 200:
                resp.request_meta["response_length"] = 0
                resp.failure(f"status {resp.status_code}: {(resp.text or str(resp.error))[:200]}")
                return
            else:
                try:
                    resp.request_meta["response_length"] = self.protocol.check(resp.json(), self.profile, item)
                except (InvalidAnswer, ValueError) as exc:
                    resp.request_meta["response_length"] = 0
                    resp.failure(f"invalid answer: {exc}")
                return
        time.sleep(wait)  # gevent-patched: only this user waits


class JevfleetUser(DecisionUser):
    protocol = PROTOCOLS["jevfleet"]


class LlamaCppPythonUser(DecisionUser):
    protocol = PROTOCOLS["llama-cpp-python"]


class LlamaServerUser(DecisionUser):
    protocol = PROTOCOLS["llama-server"]
