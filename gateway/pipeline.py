"""The path of one decision request as plain functions, shared by the HTTP gateway and the
offline `decide` command:

    read_body (gateway/body.py) → prepare → tokenize → check_tokens → [a worker] → respond

Each step raises ApiError for the client's mistakes; none touches HTTP or the fleet.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from gateway import answers, checks, wire
from gateway.prompts import Rendered, render
from shared.profiles import Profile

# (prefix text, suffix texts) -> (prefix ids, suffix ids); gateway/tokenizer.py's encode_request
Encoder = Callable[[str, list[str]], tuple[list[int], list[list[int]]]]


@dataclass(frozen=True)
class Prepared:
    request: wire.DecisionRequest
    rendered: Rendered


@dataclass(frozen=True)
class Tokens:
    prefix: list[int]
    suffixes: list[list[int]]

    @property
    def count(self) -> int:
        """usage.input_tokens: the shared state prefix counted once, plus every suffix."""
        return len(self.prefix) + sum(len(s) for s in self.suffixes)


def prepare(body: Any, profile: Profile) -> Prepared:
    """The schema (pydantic, FastAPI-shaped 422), the semantic checks (lone surrogates among
    them), then the prompt texts."""
    request = wire.validate(body)
    state_text = checks.check_request(request, profile)
    return Prepared(request=request, rendered=render(profile, request, state_text))


def check_tokens(prepared: Prepared, prefix: list[int], suffixes: list[list[int]], ctx: int) -> Tokens:
    checks.check_context(prepared.rendered, prefix, suffixes, ctx)
    return Tokens(prefix=prefix, suffixes=suffixes)


def tokenize(prepared: Prepared, encode: Encoder, ctx: int) -> Tokens:
    """Synchronous tokenizing (the gateway does the same in its thread pool)."""
    return check_tokens(prepared, *encode(prepared.rendered.prefix, prepared.rendered.suffixes), ctx)


def respond(profile: Profile, prepared: Prepared, tokens: Tokens, margins: list[float]) -> wire.DecisionResponse:
    """The 200 body: answers in request order, named after the served model (never the alias)."""
    return wire.DecisionResponse(model=profile.name,
                                 answers=answers.assemble(profile, prepared.request, prepared.rendered, margins),
                                 usage=wire.Usage(input_tokens=tokens.count, output_tokens=0))
