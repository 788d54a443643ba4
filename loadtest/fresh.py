"""Workloads without repeats: every request of a sweep asks about a state no server has seen.

The repeat-heavy workloads of workloads.json cycle a few hundred items, and every Locust run
starts again at item 0, so most of their requests come back to states a server keeps (in KV
cells or host memory): they measure caches. Users' traffic is mostly first-seen. Here item i of
a workload is a pure function of (workload, i), and the sweep gives every run its own range of i
(loadtest/sweep.py, RUN_STRIDE apart), the same range to every target of one round, so the
servers get the same prompts and no request is sent twice in a whole sweep.

A state is made new by a reference line in front of a text of workloads.json ("Case 61803399:"):
a server's prefix cache matches token by token from the start, so everything after the shared
preamble is a miss, exactly as for a text never seen before; the rest of the text keeps the
lengths the repeat-heavy workloads have, so the two kinds compare (the line itself adds 11 of
Gemma's tokens: W1-fresh reads a median 58 tokens after the preamble where W1 reads 47).

- W1-fresh: one short question about a new short state (W1's texts), every request.
- W3-fresh: many questions about new long states: W3's 100 requests (5 states, 20 questions
  each, interleaved: request k asks state k % 5 question k // 5) over and over, each pass's 5
  states new.
- W4-fresh: W4_QUESTIONS questions in one request about a new long state (W2's texts).
- repeats: W1's texts over a pool of REPEAT_POOL states drawn by a Zipf law (exponent
  ZIPF_S): the share of requests that return to a state seen earlier in the run is what
  returning_share() computes, stated with the figures (docs/benchmarks.md).
"""
from __future__ import annotations

import bisect
import itertools
import random
from functools import lru_cache

from loadtest import workloads

FRESH = ("W1-fresh", "W3-fresh", "W4-fresh", "repeats")
RUN_STRIDE = 1_000_000  # items a run may use: far above any run's requests (~60/s × 20 min)
W3_STATES = 5  # W3's states, asked in turn
W4_QUESTIONS = workloads.W4_QUESTIONS
REPEAT_POOL, ZIPF_S = 1000, 1.0
MARK_DIGITS = 8  # a reference number's digits: 10**8 items, a hundred runs of RUN_STRIDE
REPEATS_AT = 10**MARK_DIGITS - REPEAT_POOL  # repeats' states (W1's texts, as W1-fresh) number from here,
# where no run of W1-fresh reaches (it would be run 100 of one sweep), so the two never share a state


def _reference(number: int) -> str:
    """A reference line no other item has: `number` mixed one-to-one into MARK_DIGITS digits (the
    multiplier is coprime with 10**MARK_DIGITS; the golden ratio's digits, so that neighbouring
    items do not share their first digits, which a token-by-token prefix cache would reuse).
    Fixed width, so that every run of a sweep reads requests of the same lengths: the number of
    an earlier version ("Case 48213-1000007:") grew with the run, and Gemma reads each digit as
    a token, so W1-fresh requests after the first run were 4-5 tokens longer (median 63 against
    59 tokens after the preamble)."""
    if not 0 <= number < 10**MARK_DIGITS:
        raise ValueError(f"fresh item number {number} is out of range")
    return f"Case {number * 61_803_399 % 10**MARK_DIGITS:0{MARK_DIGITS}d}:"


def _fresh(number: int, text: str) -> str:
    return f"{_reference(number)} {text}"


@lru_cache(maxsize=None)
def _zipf_cdf() -> tuple[float, ...]:
    weights = [1.0 / (rank ** ZIPF_S) for rank in range(1, REPEAT_POOL + 1)]
    total = sum(weights)
    return tuple(itertools.accumulate(w / total for w in weights))


def repeat_state(index: int) -> int:
    """Which of the REPEAT_POOL states request `index` of `repeats` asks about (Zipf)."""
    draw = random.Random(f"repeats:{index}").random()
    return min(bisect.bisect_left(_zipf_cdf(), draw), REPEAT_POOL - 1)


def returning_share(requests: int, start: int = 0) -> float:
    """Of `requests` consecutive requests of `repeats` from `start`, the share whose state came
    earlier in the same run (what a cache could serve)."""
    seen: set[int] = set()
    back = 0
    for index in range(start, start + requests):
        state = repeat_state(index)
        back += state in seen
        seen.add(state)
    return back / requests


def names() -> tuple[str, ...]:
    """Every workload a sweep can run: the repeat-heavy ones of workloads.json, then these."""
    return (*workloads.names(), *FRESH)


def sample(name: str, count: int = 100) -> tuple[workloads.Item, ...]:
    """The first `count` items of any workload (what a check of their shapes needs)."""
    if name in FRESH:
        return tuple(item(name, i) for i in range(count))
    return workloads.load(name)[:count]


def item(name: str, index: int) -> workloads.Item:
    """Request `index` of a fresh workload: the same item for the same (name, index), always."""
    if name == "W1-fresh":
        w1 = workloads.load("W1")
        base = w1[index % len(w1)]
        return workloads.Item(state=_fresh(index, base.state), questions=base.questions)
    if name == "W3-fresh":
        w3 = workloads.load("W3")  # request k: state k % 5, question k // 5
        group, k = divmod(index, len(w3))
        base = w3[k]
        return workloads.Item(state=_fresh(group * W3_STATES + k % W3_STATES, base.state),
                              questions=base.questions)
    if name == "W4-fresh":
        w4 = workloads.load("W4")
        base = w4[index % len(w4)]
        return workloads.Item(state=_fresh(index, base.state), questions=base.questions, options=base.options)
    if name == "repeats":
        w1 = workloads.load("W1")
        state = repeat_state(index)
        base = w1[state % len(w1)]
        return workloads.Item(state=_fresh(REPEATS_AT + state, base.state), questions=base.questions)
    raise ValueError(f"unknown fresh workload {name!r}; choose from {', '.join(FRESH)}")
