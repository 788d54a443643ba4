"""The chaos run (loadtest/chaos.py): its requests and how it judges an answer, and,
black-box, its short version (`make chaos` is the long one).

The short run: a one-worker reference pass, then the same requests from 8 clients through HAProxy to two
gateways and three workers on network namespaces, with queues short enough that 429s come, while
every kind of fault is injected at least once; then a round of the gateway faults through HAProxy
without retries. Every 200 must equal the reference bit for bit, every other answer through the
retries-on front be a documented one, every 429 be waited out, no request be lost, and the fleet be
whole with no lifecycle breach at the end.
"""
from __future__ import annotations

import pytest

from gateway.wire import DecisionRequest
from jevfleet.harness.load import Outcome
from loadtest.chaos import DOCUMENTED, Config, run, unavailable
from loadtest.chaos_clients import DIFFERENT, SAME, Attempt, Clients, classify
from loadtest.chaos_faults import GATEWAY_KINDS, KINDS
from loadtest.chaos_fleet import RETRIES_OFF, RETRIES_ON
from loadtest.chaos_requests import KINDS as REQUEST_KINDS
from loadtest.chaos_requests import answer, request, requests


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
    page = {"error": "<html><body><h1>502 Bad Gateway</h1>\nThe server returned an invalid or incomplete response."}
    assert classify(outcome(502, page), {})[0] == ("undocumented: status 502 502 Bad Gateway The server returned an "
                                                   "invalid or incomplete response.")


def test_a_429_counts_as_waited_out_only_when_the_next_attempt_came_after_its_retry_after():
    clients = Clients({RETRIES_ON: "http://lb"}, RETRIES_ON, [], [], 2, 10)
    refused = "429 with Retry-After"
    for attempt in (Attempt(0, "c0", refused, 0.0, 1.0, retry_after=2.0),
                    Attempt(1, "c1", refused, 0.0, 1.0, retry_after=30.0),
                    Attempt(0, "c0", refused, 3.0, 3.5, retry_after=1.0), Attempt(1, "c1", SAME, 11.0, 12.0),
                    Attempt(0, "c0", SAME, 4.5, 5.0)):
        clients.record(attempt)
    stats = clients.refusals(429)
    assert stats == {"count": 3, "retry_after_s": {"1": 1, "2": 1, "30": 1}, "retried_after_waiting": 3,
                     "retried_early": 0}  # a Retry-After of 30 is waited out at the 10 s cap
    clients.record(Attempt(2, "c1", refused, 20.0, 21.0, retry_after=5))
    clients.record(Attempt(2, "c1", SAME, 22.0, 23.0))  # 1 s after a Retry-After of 5
    assert clients.refusals(429)["retried_early"] == 1


def test_attempts_are_told_apart_by_the_front_they_went_through():
    clients = Clients({RETRIES_ON: "http://a", RETRIES_OFF: "http://b"}, RETRIES_ON, [], [], 1, 1)
    clients.record(Attempt(0, "c0", "undocumented: status 502", 0, 1, front=RETRIES_OFF))
    clients.record(Attempt(0, "c0", SAME, 2, 3, front=RETRIES_ON))
    assert clients.tally((RETRIES_OFF,)) == {"undocumented: status 502": 1}
    assert clients.tally((RETRIES_ON,)) == {SAME: 1}
    assert clients.tally() == {"undocumented: status 502": 1, SAME: 1}


@pytest.mark.fleet
@pytest.mark.multihost
def test_under_every_kind_of_fault_each_answer_is_the_reference_and_none_is_lost(tmp_path, capsys):
    if reason := unavailable():
        pytest.skip(reason)
    lines: list[str] = []
    cfg = Config(duration_s=60, seed=30, requests=24, off_rounds=1, out=tmp_path)
    report = run(cfg, lines.append)
    with capsys.disabled():
        print("\n" + report.summary())

    assert {kind for kind, n in report.faults_by_kind.items() if n} == set(KINDS), report.faults_by_kind
    off = [f["kind"] for f in report.faults if f["front"] == RETRIES_OFF]
    assert sorted(off) == sorted(GATEWAY_KINDS) and report.retries_off_outcomes  # the retries-off phase ran
    assert report.refused_429["count"] > 0 and report.refused_429["retried_early"] == 0  # queues were full
    stalls = [f for f in report.faults if f["kind"] == "gateway SIGSTOP/SIGCONT"]
    assert all(f["seen_s"] is not None for f in stalls), stalls  # HAProxy took the stalled gateway out
    assert all(set(f["held"]) <= set(DOCUMENTED) for f in stalls), stalls  # what it held: answered or refused
    assert report.requests > cfg.requests  # the fixed requests went round more than once
    assert not report.mismatches, report.mismatches[:3]
    assert not report.lost, report.lost
    assert not report.undocumented, report.undocumented
    assert all(f["whole_s"] is not None for f in report.faults), report.faults
    assert not report.missing_at_end
    assert not report.lifecycle_breaches, report.lifecycle_breaches[:3]
    assert report.answered == report.requests and report.passed
