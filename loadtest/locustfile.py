"""Locust users that ask decision questions, one user class per kind of server.

    locust -f loadtest/locustfile.py --host http://127.0.0.1:8017 --workload W2 JevfleetUser

Each user is a closed-loop client (no think time): it posts the next request of the workload
(one shared sequence for all users, so W3's state/question order holds), reads the answer and
checks it (loadtest/validate.py). Outcomes, as Locust records them:
  "answer"  a response; a failure when the status is not 200 or the body is not a valid answer
  "shed"    429/503: the server refused work it could not take in time; counted apart from
            errors, and the user waits the Retry-After (at most 5 s) like the SDK does
"""
from __future__ import annotations

import itertools
import time
from functools import lru_cache

from locust import FastHttpUser, constant, events, task

from loadtest import validate, workloads
from shared.profiles import Profile, load_profile

SHED_STATUSES = (429, 503)
MAX_RETRY_WAIT_S = 5.0
TOP_K = 20  # next-token alternatives asked of the baselines; the yes/no tokens are always in it

_sequence = itertools.count()


@events.init_command_line_parser.add_listener
def _options(parser) -> None:
    parser.add_argument("--workload", default="W1", choices=workloads.names(),
                        help="which workload of loadtest/workloads.json to send")
    parser.add_argument("--model-profile", default="gemma-3-270m",
                        help="model profile used to render prompts for the baselines")


@lru_cache(maxsize=None)
def _profile(name: str) -> Profile:
    return load_profile(name)


class DecisionUser(FastHttpUser):
    """One request per loop; subclasses say what to post and how to read the answer."""

    abstract = True
    wait_time = constant(0)
    network_timeout = 300.0
    connection_timeout = 30.0
    path = ""

    def on_start(self) -> None:
        options = self.environment.parsed_options
        self.items = workloads.load(getattr(options, "workload", "W1"))
        self.profile = _profile(getattr(options, "model_profile", "gemma-3-270m"))

    def body(self, item: workloads.Item) -> dict:
        raise NotImplementedError

    def check(self, body: object) -> float:
        raise NotImplementedError

    @task
    def decide(self) -> None:
        item = self.items[next(_sequence) % len(self.items)]
        with self.client.post(self.path, json=self.body(item), name="answer", catch_response=True) as resp:
            if resp.status_code in SHED_STATUSES:
                resp.request_meta["name"] = "shed"
                resp.success()
                wait = min(float(resp.headers.get("Retry-After") or 1), MAX_RETRY_WAIT_S)
            elif resp.status_code != 200:
                resp.failure(f"status {resp.status_code}: {(resp.text or str(resp.error))[:200]}")
                return
            else:
                try:
                    self.check(resp.json())
                except (validate.InvalidAnswer, ValueError) as exc:
                    resp.failure(f"invalid answer: {exc}")
                return
        time.sleep(wait)  # gevent-patched: only this user waits


class JevfleetUser(DecisionUser):
    """POST /v1/systemone with one noul question."""

    path = "/v1/systemone"

    def body(self, item: workloads.Item) -> dict:
        return workloads.decision_body(item)

    def check(self, body: object) -> float:
        return validate.check_decision(body, workloads.QUESTION_ID)


class LlamaCppPythonUser(DecisionUser):
    """llama-cpp-python's server: OpenAI /v1/completions, one token, top-k log-probabilities."""

    path = "/v1/completions"

    def body(self, item: workloads.Item) -> dict:
        return {"prompt": workloads.prompt_text(self.profile, item), "max_tokens": 1, "logprobs": TOP_K,
                "temperature": 0.0}

    def check(self, body: object) -> float:
        return validate.check_openai_completion(body, self.profile)


class LlamaServerUser(DecisionUser):
    """llama.cpp's llama-server: native /completion, n_predict 1, n_probs."""

    path = "/completion"

    def body(self, item: workloads.Item) -> dict:
        return {"prompt": workloads.prompt_text(self.profile, item), "n_predict": 1, "n_probs": TOP_K,
                "temperature": 0.0, "cache_prompt": True}

    def check(self, body: object) -> float:
        return validate.check_llama_server_completion(body, self.profile)
