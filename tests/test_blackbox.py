"""Black-box tests: the real fleet (supervisord, gateway, a worker, the real model) over HTTP, and
the routes that need no answer on the in-process gateway (tests/inprocess.py)."""
from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import pytest

from client.net import http, post_json
from jevfleet.harness.fleet import Fleet
from jevfleet.harness.load import states
from shared.messages import SnapshotStats, WorkerStats
from tests.test_metrics import families, sample

README_EXAMPLE = {
    "model": "jev-latest",
    "state": "I was charged twice for the same order.",
    "questions": {"billing": {"type": "noul", "instructions": "Is this a billing problem?"}},
}

# (question, a state where the answer is plainly yes, one where it is plainly no). Which scores higher is
# not asserted: Gemma 3 270M answers them at chance, so such a test checks one CPU's bits, not the code.
CLEAR_PAIRS = [
    ("Is this a billing problem?", "I was charged twice for my order and want the extra payment back.",
     "The app crashes every time I open the settings page."),
    ("Is the meeting on Friday?", "The team meeting is scheduled for Friday at 10am.",
     "The team meeting is scheduled for Tuesday at 10am."),
    ("Is the customer happy?", "I love this product, it works perfectly and I am very happy with it.",
     "This product is terrible, it broke after one day and I am very unhappy."),
    ("Is the text about a dog?", "My dog loves to chase the ball in the park.",
     "The stock market fell sharply this morning."),
    ("Is the user asking for a refund?", "I want a refund for this broken blender, please return my money.",
     "Can you tell me how to change my password?"),
    ("Is the order cancelled?", "Your order has been cancelled at your request.",
     "Your order has shipped and will arrive tomorrow."),
]


def ask(fleet: Fleet, state: str, question: str) -> float:
    status, _, body = post_json(fleet.url + "/v1/systemone", {
        "model": "jev-latest", "state": state, "questions": {"q": {"type": "noul", "instructions": question}}})
    assert status == 200, body
    return body["answers"]["q"]["noul"]


@pytest.mark.fleet
def test_readme_example_answers_with_a_probability(fleet):
    status, headers, body = post_json(fleet.url + "/v1/systemone", README_EXAMPLE)
    assert status == 200, body
    assert body["model"] == "gemma-3-270m"
    answer = body["answers"]["billing"]
    assert answer["type"] == "noul" and 0.0 <= answer["noul"] <= 1.0
    assert isinstance(body["usage"]["input_tokens"], int) and body["usage"]["input_tokens"] > 0
    assert body["usage"]["output_tokens"] == 0
    phases = [part.split(";")[0] for part in headers["Server-Timing"].split(", ")]
    assert phases == ["parse", "validate", "tokenize", "queue", "inference", "outside", "respond", "total"]
    assert headers["x-request-id"]


def answers_by_batch_size(fleet: Fleet) -> tuple[float, float]:
    """How many answers so far ran in a batch of one, and in a batch of at most two (/metrics)."""
    fams = families(http("GET", fleet.url + "/metrics")[2].decode())
    return tuple(sample(fams, "jevfleet_batch_requests", "jevfleet_batch_requests_bucket", le=le)
                 for le in ("1.0", "2.0"))


@pytest.mark.fleet
def test_concurrent_requests_each_get_their_own_answer(fleet):
    """Two requests read in one batch get the answers each got alone."""
    q, yes, no = CLEAR_PAIRS[2]
    alone = {yes: ask(fleet, yes, q), no: ask(fleet, no, q)}
    (blocker,) = states(1, tag="blocker ", words=350)  # about 450 tokens, over a batch's 384: read alone
    before = answers_by_batch_size(fleet)
    with ThreadPoolExecutor(3) as pool:
        first = pool.submit(ask, fleet, blocker, q)
        fleet.wait_for(lambda h: h["fleet"]["inflight"] == 1, "the blocker sent")
        pair = [pool.submit(ask, fleet, state, q) for state in (yes, no)]
        # both at the worker (its own count, the running batch included) while the blocker is
        # unanswered: the worker's next batch takes them together
        fleet.wait_for(lambda h: h["fleet"]["inflight"] == 3 and h["workers"][0]["stats"]["queued_requests"] == 3,
                       "the pair queued behind the blocker")
        together = {yes: pair[0].result(), no: pair[1].result()}
        first.result()
    after = answers_by_batch_size(fleet)
    assert (after[0] - before[0], after[1] - before[1]) == (1, 3)  # the blocker alone, the pair as a batch of 2
    assert together == alone  # deterministic mode: batch mates do not change an answer


@pytest.mark.fleet
def test_health_reports_ready_workers_and_model_identity(fleet):
    status, _, raw = http("GET", fleet.url + "/health")
    body = json.loads(raw)
    assert status == 200 and body["status"] == "ready"
    assert body["model"] == "gemma-3-270m"
    (worker,) = body["workers"]
    assert set(worker) >= {"id", "pid", "cores", "state", "queued_tokens", "queued_requests"}
    assert worker["state"] == "up" and worker["cores"]
    assert isinstance(body["engine"]["batched_requests"], int)
    (sha,) = body["model_files"].values()
    assert len(sha) == 64 and body["fingerprint"] == f"gemma-3-270m:{sha[:16]}:deterministic"
    assert set(worker["stats"]) == set(WorkerStats.__struct_fields__)  # the worker's own, as it sent them
    assert set(worker["stats"]["state_snapshots"]) == set(SnapshotStats.__struct_fields__)


def test_models_lists_the_served_model_then_the_alias(gateway):
    status, _, raw = http("GET", gateway.url + "/v1/models")
    assert status == 200
    names = [m["name"] for m in json.loads(raw)["models"]]
    assert names == ["gemma-3-270m", "jev-latest"]
    assert all(len(m["release_date"]) == 10 for m in json.loads(raw)["models"])


def test_unknown_path_and_wrong_method_answer_json(gateway):
    status, headers, raw = http("GET", gateway.url + "/nowhere")
    assert (status, json.loads(raw)) == (404, {"detail": "Not Found"})
    status, headers, raw = http("GET", gateway.url + "/v1/systemone")
    assert (status, json.loads(raw)) == (405, {"detail": "Method Not Allowed"})
    assert headers["Allow"] == "POST"


def test_bad_body_is_a_422_not_a_5xx(gateway):
    status, _, body = post_json(gateway.url + "/v1/systemone", {"model": "jev-latest", "state": "x", "questions": {}})
    assert status == 422 and body["detail"][0]["loc"] == ["body", "questions"]
    status, _, body = post_json(gateway.url + "/v1/systemone", {**README_EXAMPLE, "model": "gpt-4"})
    assert status == 422 and body["detail"][0]["type"] == "value_error"
