"""client/local.py: a request answered in this process carries the worker's own message."""
from __future__ import annotations

import pytest

from client.local import LocalDecider
from shared.config import default_settings
from shared.messages import Result

pytestmark = pytest.mark.model

BODY = {"model": "jev-latest", "state": "The parcel arrived broken and the customer wants a refund.",
        "questions": {"refund": {"type": "noul", "instructions": "Does the customer ask for money back?"},
                      "late": {"type": "noul", "instructions": "Was the parcel late?"}}}


@pytest.fixture(scope="module")
def decider():
    decider = LocalDecider(default_settings())
    yield decider
    decider.close()


def test_an_answer_carries_its_batch_figures(decider):
    """An in-process answer carries its queue time, run time and batch size, as a served one does."""
    answer = decider.answer_body(BODY).result(timeout=300)
    assert answer.status == 200, answer.body
    assert isinstance(answer.result, Result)
    assert answer.result.batch_requests == 1  # alone in its batch
    assert list(answer.result.margins) == answer.margins and len(answer.margins) == 2
    assert answer.result.run_ms > 0 and answer.result.read_tokens > 0


def test_a_refused_request_has_no_worker_message(decider):
    answer = decider.answer_body({"model": "jev-latest", "state": "x", "questions": {}}).result(timeout=60)
    assert answer.status == 422 and answer.result is None  # as the server: validation error
