"""What each kind of server is asked for one workload item, and how its answer is read.

Shared by the Locust users (loadtest/locustfile.py) and the sweep's settle probe, which must
not import locust (it monkey-patches the process with gevent).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from loadtest import validate
from loadtest.workloads import QUESTION_ID, Item, decision_body, prompt_text
from shared.profiles import Profile

TOP_K = 20  # next-token alternatives asked of the baselines; the yes/no tokens are always in it


@dataclass(frozen=True)
class Protocol:
    path: str
    body: Callable[[Profile, Item], dict]
    check: Callable[[Any, Profile], float]  # P(yes), or raises validate.InvalidAnswer


PROTOCOLS: dict[str, Protocol] = {
    # our gateway: one noul question per request
    "jevfleet": Protocol(
        "/v1/systemone",
        lambda profile, item: decision_body(item),
        lambda body, profile: validate.check_decision(body, QUESTION_ID)),
    # llama-cpp-python's server: OpenAI /v1/completions, one token, top-k log-probabilities
    "llama-cpp-python": Protocol(
        "/v1/completions",
        lambda profile, item: {"prompt": prompt_text(profile, item), "max_tokens": 1, "logprobs": TOP_K,
                               "temperature": 0.0},
        validate.check_openai_completion),
    # llama.cpp's llama-server: native /completion, n_predict 1, n_probs
    "llama-server": Protocol(
        "/completion",
        lambda profile, item: {"prompt": prompt_text(profile, item), "n_predict": 1, "n_probs": TOP_K,
                               "temperature": 0.0, "cache_prompt": True},
        validate.check_llama_server_completion),
}
