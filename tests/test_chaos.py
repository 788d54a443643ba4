"""The chaos run (jevfleet/harness/chaos.py): its requests and how it judges an answer, and,
black-box, its short version (`make chaos` is the long one).

The short run: a one-worker reference pass, then the same requests from 8 clients through HAProxy to two
gateways and three workers on network namespaces while every kind of fault is injected at least
once. Every 200 must equal the reference bit for bit, every other answer be a documented one, no
request be lost, and the fleet be whole with no lifecycle breach at the end.
"""
from __future__ import annotations

import pytest

from gateway.wire import DecisionRequest
from jevfleet.harness.chaos import Config, run, unavailable
from jevfleet.harness.chaos_clients import DIFFERENT, SAME, classify
from jevfleet.harness.chaos_faults import KINDS
from jevfleet.harness.chaos_requests import KINDS as REQUEST_KINDS
from jevfleet.harness.chaos_requests import answer, request, requests
from jevfleet.harness.load import Outcome


def test_the_requests_are_a_function_of_seed_and_index_valid_and_each_state_new():
    reqs = requests(7, 60)
    assert [r.body for r in reqs] == [request(7, i).body for i in range(60)]
    assert request(8, 0).body != reqs[0].body
    assert len({r.body["state"] for r in reqs}) == 60
    assert {r.kind for r in reqs} == set(REQUEST_KINDS)
    for r in reqs:
        DecisionRequest.model_validate(r.body)  # what the gateway accepts
    types = {q["type"] for r in reqs for q in r.body["questions"].values()}
    assert types == {"noul", "choice", "score"}
    assert max(len(r.body["questions"]) for r in reqs) >= 6


def outcome(status: int, body: dict, headers: dict | None = None) -> Outcome:
    return Outcome(0, status, body, headers or {}, 0.0, 0.0)


def test_an_answer_counts_as_the_reference_only_when_every_float_is_the_same():
    body = {"model": "m", "answers": {"q": {"type": "noul", "noul": 0.49827363199379704}},
            "usage": {"input_tokens": 257, "output_tokens": 0}}
    reference = answer(body)
    assert classify(outcome(200, body), reference) == (SAME, 0.0)
    off = {**body, "answers": {"q": {"type": "noul", "noul": 0.49827363199379710}}}  # one ulp away
    assert classify(outcome(200, off), reference)[0] == DIFFERENT
    other_usage = {**body, "usage": {"input_tokens": 258, "output_tokens": 0}}
    assert classify(outcome(200, other_usage), reference)[0] == DIFFERENT


def test_a_refusal_is_documented_only_with_retry_after_and_is_retried_after_it():
    assert classify(outcome(429, {}, {"Retry-After": "3"}), {}) == ("429 with Retry-After", 3.0)
    assert classify(outcome(503, {}, {"retry-after": "90"}), {}) == ("503 with Retry-After", 10.0)  # capped
    assert classify(outcome(503, {"error": "<html>"}), {})[0].startswith("undocumented: status 503")
    assert classify(outcome(0, {"error": "reset"}), {})[0].startswith("undocumented: connection error")
    assert classify(outcome(502, {}), {})[0].startswith("undocumented: status 502")


@pytest.mark.fleet
@pytest.mark.multihost
def test_under_every_kind_of_fault_each_answer_is_the_reference_and_none_is_lost(tmp_path, capsys):
    if reason := unavailable():
        pytest.skip(reason)
    lines: list[str] = []
    cfg = Config(duration_s=60, seed=30, requests=24, out=tmp_path)
    report = run(cfg, lines.append)
    with capsys.disabled():
        print("\n" + report.summary())

    assert {kind for kind, n in report.faults_by_kind.items() if n} == set(KINDS), report.faults_by_kind
    assert report.requests > cfg.requests  # the fixed requests went round more than once
    assert not report.mismatches, report.mismatches[:3]
    assert not report.lost, report.lost
    assert not report.undocumented, report.undocumented
    assert all(f["whole_s"] is not None for f in report.faults), report.faults
    assert not report.missing_at_end
    assert not report.lifecycle_breaches, report.lifecycle_breaches[:3]
    assert report.answered == report.requests and report.passed
