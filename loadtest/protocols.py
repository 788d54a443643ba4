"""What each kind of server is asked for one workload item, and how its answer is read.

Shared by the Locust users (loadtest/locustfile.py) and the sweep's settle probe, which must
not import locust (it monkey-patches the process with gevent). A check returns the number of
questions answered (a choice is one question, however many options it has), or raises
validate.InvalidAnswer.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from loadtest import validate
from loadtest.workloads import Item, decision_body, prompt_texts
from shared.profiles import Profile

TOP_K = 20  # next-token alternatives asked of the baselines; the yes/no tokens are always in it


@dataclass(frozen=True)
class Protocol:
    path: str
    body: Callable[[Profile, Item], dict]
    check: Callable[[Any, Profile, Item], int]
    many_prompts: bool  # takes the prompts of a many-question request in one call


def _one_prompt(profile: Profile, item: Item) -> str:
    (prompt,) = prompt_texts(profile, item)
    return prompt


def _llama_server_body(profile: Profile, item: Item) -> dict:
    """One prompt as a string; a many-question request as llama-server's list of prompts (one
    result each, in a JSON array)."""
    prompts = prompt_texts(profile, item)
    return {"prompt": prompts[0] if len(prompts) == 1 else list(prompts), "n_predict": 1, "n_probs": TOP_K,
            "temperature": 0.0, "cache_prompt": True}


def _check_one(check: Callable[[Any, Profile], float]) -> Callable[[Any, Profile, Item], int]:
    def checked(body: Any, profile: Profile, item: Item) -> int:
        check(body, profile)
        return 1
    return checked


PROTOCOLS: dict[str, Protocol] = {
    # our gateway: the item's questions in one request
    "jevfleet": Protocol(
        "/v1/systemone",
        lambda profile, item: decision_body(item),
        lambda body, profile, item: validate.check_answers(body, item.question_ids,
                                                           "choice" if item.options else "noul"),
        many_prompts=True),
    # llama-cpp-python's server: OpenAI /v1/completions, one token, top-k log-probabilities;
    # it takes one prompt per call
    "llama-cpp-python": Protocol(
        "/v1/completions",
        lambda profile, item: {"prompt": _one_prompt(profile, item), "max_tokens": 1, "logprobs": TOP_K,
                               "temperature": 0.0},
        _check_one(validate.check_openai_completion),
        many_prompts=False),
    # llama.cpp's llama-server: native /completion, n_predict 1, n_probs
    "llama-server": Protocol(
        "/completion",
        _llama_server_body,
        lambda body, profile, item: validate.check_llama_server_completions(
            body, profile, len(prompt_texts(profile, item)), 1 if item.options else len(item.questions)),
        many_prompts=True),
}
