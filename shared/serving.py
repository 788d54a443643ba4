"""What a worker serves, stated as facts the gateway compares with its own before it sends the
worker any work.

The gateway renders and tokenizes every prompt and sends the answer-token ids itself; the worker
only reads those ids. So a worker gives the gateway's answers only if it reads the same model
bytes, was started from the same profile, computes in the same mode, and its tokenizer turns the
profile's prompt pieces into the same ids. Both sides compute the facts with this one function.
"""
from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Callable

from shared.messages import prefix_key
from shared.model_files import file_sha256
from shared.profiles import Profile, answer_ids, preamble_tokens

Tokenize = Callable[..., list[int]]  # tokenize(text, add_bos=...) -> ids


def serving_facts(*, profile: Profile, model_sha256: str, mode: str, tokenize: Tokenize) -> dict[str, str]:
    """model_sha256, profile (name and a digest of its file), mode, head (a digest of the learned
    head's file, or "none"), and `tokens`: a key of the ids of the prompt preamble and of every
    yes/no answer word, which differs if the vocabulary or the tokenizer does."""
    words = partial(tokenize, add_bos=False)
    probe = preamble_tokens(tokenize, profile) + answer_ids(words, profile.yes) + answer_ids(words, profile.no)
    return {
        "model_sha256": model_sha256,
        "profile": f"{profile.name}:{file_sha256(profile.source)[:16]}",
        "mode": mode,
        "head": file_sha256(Path(profile.head))[:16] if profile.head else "none",
        "tokens": prefix_key(probe),
    }


def with_arithmetic(facts: dict[str, str], *, arithmetic: str, llama_build: str) -> dict[str, str]:
    """A worker's facts with its arithmetic: `arithmetic`, a digest of the exact bits of its
    start-up probe's answer (worker/canary.py arithmetic_digest), and `llama_build`, which
    llama.cpp build computed them (shared/llama.build_description). The gateway cannot compute
    these (it loads no weights): the fleet's are pinned by a setting or the first member's, and a
    worker whose bits differ is refused (gateway/admission.py). Two workers with the same model,
    profile and mode give other bits when their llama.cpp builds take other kernels (another
    instruction-set level, another compiler), and nothing else would tell."""
    return {**facts, "arithmetic": arithmetic, "llama_build": llama_build}


def fingerprint(facts: dict[str, str]) -> str:
    """A short label of what is served (profile name, GGUF digest, mode) for people reading
    /health; admission compares the whole facts, never this label."""
    return f"{facts['profile'].partition(':')[0]}:{facts['model_sha256'][:16]}:{facts['mode']}"


def mismatch(expected: dict[str, str], offered: dict[str, str]) -> str | None:
    """None if `offered` (a worker's facts) agrees with `expected` (the gateway's) on every
    fact the gateway states, else which facts differ, both values named."""
    differ = [name for name in expected if offered.get(name) != expected[name]]
    if not differ:
        return None
    return "; ".join(f"{name} is {offered.get(name, 'not stated')!r}, the gateway's is {expected[name]!r}"
                     for name in differ)
