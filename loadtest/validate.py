"""Checking every answer a load run gets back, for each kind of server.

A load test that counts 200s without reading them measures how fast a server can fail. Each
check returns P(yes) in [0, 1] or raises InvalidAnswer saying what was wrong.

The baselines answer with the top-k log-probabilities of the next token; P(yes) is read from
them the way our gateway reads logits: the log-sum-exp of the profile's yes tokens against its
no tokens, then the profile's calibration (gateway.answers.p_yes). A side missing from the
top k is bounded by the smallest log-probability listed (its true value is at most that).
"""
from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

from gateway.answers import p_yes
from shared.profiles import Profile


class InvalidAnswer(ValueError):
    """A response with status 200 whose body is not a well-formed answer."""


def _probability(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:
        raise InvalidAnswer(f"{where} is {value!r}, not a probability in [0, 1]")
    return float(value)


def check_decision(body: Any, question_id: str) -> float:
    """A /v1/systemone answer to one noul question: its P(yes)."""
    check_answers(body, (question_id,), "noul")
    return float(body["answers"][question_id]["noul"])


def check_answers(body: Any, question_ids: Sequence[str], kind: str) -> int:
    """A /v1/systemone answer to `question_ids`, each a noul or each a choice (`kind`): the
    number of questions answered."""
    try:
        answers = body["answers"]
        usage = body["usage"]
    except (KeyError, TypeError) as exc:
        raise InvalidAnswer(f"missing {exc} in {str(body)[:200]}") from None
    if not isinstance(body.get("model"), str) or not body["model"]:
        raise InvalidAnswer("no model name")
    if not isinstance(answers, dict) or set(answers) != set(question_ids):
        raise InvalidAnswer(f"answers for {sorted(answers) if isinstance(answers, dict) else answers!r}, "
                            f"asked {sorted(question_ids)}")
    if not isinstance(usage, dict) or not isinstance(usage.get("input_tokens"), int) or usage.get("output_tokens") != 0:
        raise InvalidAnswer(f"bad usage {usage!r}")
    for qid in question_ids:
        answer = answers[qid]
        if not isinstance(answer, dict) or answer.get("type") != kind:
            raise InvalidAnswer(f"answer {qid!r} is {str(answer)[:80]}, asked a {kind}")
        if kind == "noul":
            _probability(answer.get("noul"), "noul")
            continue
        probabilities = answer.get("probabilities")
        if not isinstance(probabilities, dict) or answer.get("choice") not in probabilities:
            raise InvalidAnswer(f"choice {answer.get('choice')!r} is not among its probabilities")
        for name, value in probabilities.items():
            _probability(value, f"probability of {name!r}")
        _probability(answer.get("confidence"), "confidence")
    return len(question_ids)


# The name bench/zoo.py gives its files (random weights: their next-token tops are noise, where
# neither answer need be; a derived profile's description carries the file's name)
RANDOM_WEIGHTS = "random weights, jevfleet zoo"


def yes_probability(profile: Profile, top: Mapping[str, float]) -> float:
    """P(yes) from a next-token {token text: log-probability} top-k map."""
    if not top:
        raise InvalidAnswer("no top log-probabilities")
    for token, logprob in top.items():
        if not isinstance(logprob, (int, float)) or math.isnan(logprob) or logprob > 1e-6:
            raise InvalidAnswer(f"log-probability of {token!r} is {logprob!r}")
    floor = min(top.values())

    def group(tokens: tuple[str, ...]) -> float:
        found = [top[t] for t in tokens if t in top]
        if not found:
            return floor
        peak = max(found)
        return peak + math.log(sum(math.exp(v - peak) for v in found))

    if not any(t in top for t in profile.yes + profile.no):
        if RANDOM_WEIGHTS in profile.description:  # a zoo file: noise on top, only its speed is measured
            return math.nan
        raise InvalidAnswer(f"neither yes nor no among the top {len(top)} tokens: {sorted(top)[:8]}")
    return _probability(p_yes(profile, group(profile.yes) - group(profile.no)), "P(yes)")


def check_openai_completion(body: Any, profile: Profile) -> float:
    """An OpenAI /v1/completions answer with max_tokens 1 and logprobs (llama-cpp-python)."""
    try:
        top = body["choices"][0]["logprobs"]["top_logprobs"][0]
    except (KeyError, IndexError, TypeError) as exc:
        raise InvalidAnswer(f"no top_logprobs ({exc!r}) in {str(body)[:200]}") from None
    return yes_probability(profile, top)


def check_llama_server_completion(body: Any, profile: Profile) -> float:
    """A llama-server /completion answer with n_predict 1 and n_probs."""
    try:
        entries = body["completion_probabilities"][0]["top_logprobs"]
        top = {e["token"]: e["logprob"] for e in entries}
    except (KeyError, IndexError, TypeError) as exc:
        raise InvalidAnswer(f"no completion_probabilities ({exc!r}) in {str(body)[:200]}") from None
    return yes_probability(profile, top)


def check_llama_server_completions(body: Any, profile: Profile, prompts: int, questions: int) -> int:
    """llama-server's answer to `prompts` prompts in one /completion call (one object for one
    prompt, else an array of them): every P(yes) readable. Returns `questions`, the number of
    questions those prompts ask."""
    results = [body] if prompts == 1 else body
    if not isinstance(results, list) or len(results) != prompts:
        raise InvalidAnswer(f"{len(results) if isinstance(results, list) else 'no'} results for {prompts} prompts")
    for result in results:
        check_llama_server_completion(result, profile)
    return questions
