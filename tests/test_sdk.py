"""The official Python client (typesafe-sdk): its normal calls against the real fleet, with its
zstd body compression on and off; its model list, API key and error mapping against the
in-process gateway (tests/inprocess.py), which answers without the model."""
from __future__ import annotations

import httpx2
import pytest
from typesafe_sdk import (Choice, Noul, Score, TypeSafeAuthenticationError, TypeSafeClient,
                          TypeSafeUnprocessableEntityError)

from tests.conftest import API_KEY

QUESTIONS = {
    "billing": Noul(instructions="Is this a billing problem?"),
    "team": Choice(instructions="Which team should handle it?", criteria={"billing": "payments, refunds", "tech": None}),
    "anger": Score(instructions="How upset is the customer?", criteria=["calm", "annoyed", "furious"]),
}
SHORT_STATE = "I was charged twice for the same order."
LONG_STATE = SHORT_STATE + " " + "The order number is 1017 and I paid by card. " * 25  # > 1 KiB: compressed


class Recorder:
    """Request headers as the SDK sent them (through an httpx2 event hook)."""

    def __init__(self) -> None:
        self.headers: list[httpx2.Headers] = []

    def client(self) -> httpx2.Client:
        return httpx2.Client(timeout=300, event_hooks={"request": [lambda request: self.headers.append(request.headers)]})


def sdk(url: str, *, api_key: str = "local", compression=None, recorder: Recorder | None = None) -> TypeSafeClient:
    http_client = recorder.client() if recorder else httpx2.Client(timeout=300)
    return TypeSafeClient(base_url=url, api_key=api_key, compression=compression, http_client=http_client)


def check_result(result) -> None:
    assert result.model == "gemma-3-270m"
    assert 0 <= result.nouls["billing"].noul <= 1
    team = result.choices["team"]
    assert team.choice in ("billing", "tech") and set(team.probabilities) == {"billing", "tech"}
    assert sum(team.probabilities.values()) == pytest.approx(1) and 0 <= team.confidence <= 1
    anger = result.scores["anger"]
    assert dict(anger.legend) == {0: "calm", 1: "annoyed", 2: "furious"} and set(anger.probabilities) == {0, 1, 2}
    assert anger.score == pytest.approx(sum(i * p for i, p in anger.probabilities.items()))
    assert isinstance(result.usage.input_tokens, int) and result.usage.input_tokens > 0


@pytest.mark.fleet
def test_sdk_asks_noul_choice_and_score_without_compression(fleet):
    recorder = Recorder()
    with sdk(fleet.url, compression=False, recorder=recorder) as client:
        check_result(client.system_one(state=SHORT_STATE, questions=QUESTIONS))
    assert "content-encoding" not in recorder.headers[-1]


@pytest.mark.fleet
def test_sdk_zstd_compressed_body_gets_the_same_answer_as_uncompressed(fleet):
    recorder = Recorder()
    with sdk(fleet.url, compression="zstd", recorder=recorder) as client:
        compressed = client.system_one(state=LONG_STATE, questions=QUESTIONS)
    assert recorder.headers[-1]["content-encoding"] == "zstd"
    with sdk(fleet.url, compression=False) as client:
        plain = client.system_one(state=LONG_STATE, questions=QUESTIONS)
    check_result(compressed)
    assert compressed.model_dump() == plain.model_dump()


def test_sdk_lists_the_served_model_and_the_alias(gateway):
    with sdk(gateway.url) as client:
        assert [m.name for m in client.models.list().models] == ["gemma-3-270m", "jev-latest"]


def test_sdk_sees_a_422_as_unprocessable_with_the_message_and_request_id(gateway):
    with sdk(gateway.url) as client, pytest.raises(TypeSafeUnprocessableEntityError) as caught:
        client.system_one(state=SHORT_STATE, questions=QUESTIONS, model="gpt-4")
    assert "Unknown model 'gpt-4'" in str(caught.value) and caught.value.request_id


def test_sdk_with_the_right_api_key_is_answered(auth_gateway):
    with sdk(auth_gateway.url, api_key=API_KEY) as client:
        check_result(client.system_one(state=LONG_STATE, questions=QUESTIONS))


def test_sdk_with_a_wrong_api_key_gets_an_authentication_error(auth_gateway):
    with sdk(auth_gateway.url, api_key="not-the-key") as client, pytest.raises(TypeSafeAuthenticationError) as caught:
        client.system_one(state=SHORT_STATE, questions=QUESTIONS)
    assert caught.value.status == 401 and "API key" in str(caught.value)
