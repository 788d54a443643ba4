"""The decision API over HTTP (docs/wire.md): the answers of all three types from the real fleet,
and everything decided before inference (headers, content types, compression, limits, auth) from
the in-process gateway (tests/inprocess.py), which runs the same request path with no model.

A test's tier follows from its fixture: `fleet` (real model, supervisord) or `gateway`/`auth_gateway`
(fast); the answered requests are small, except the one 1024-question request."""
from __future__ import annotations

import gzip
import json
import logging
import math
import re
import socket
import sys
import zlib

import pytest

from client.net import http
from tests.conftest import API_KEY

if sys.version_info >= (3, 14):
    from compression import zstd
else:
    from backports import zstd

PATH = "/v1/systemone"
JSON = {"Content-Type": "application/json"}
MIXED = {"model": "jev-latest", "state": "I was charged twice for the same order.", "questions": {
    "billing": {"type": "noul", "instructions": "Is this a billing problem?"},
    "team": {"type": "choice", "instructions": "Which team should handle it?",
             "criteria": {"billing": "payments, refunds", "tech": None}},
    "anger": {"type": "score", "instructions": "How upset is the customer?", "criteria": ["calm", "annoyed", "furious"]},
}}
SMALL = {"model": "jev-latest", "state": "The parcel arrived on Monday.", "questions": {"q": {"type": "noul"}}}
# Refused by a check after parsing, before tokenizing: proves the body was read as JSON
UNKNOWN_MODEL = {**SMALL, "model": "gpt-4"}
UNKNOWN_MODEL_ERROR = {"detail": [{"loc": ["body", "model"], "type": "value_error", "msg":
                                   "Unknown model 'gpt-4': this server answers as 'gemma-3-270m' and accepts any "
                                   "'jev-*' alias"}]}


def post(server, body: bytes, headers: dict | None = None, timeout: float = 120) -> tuple[int, dict, object]:
    """POST to a fleet or an in-process gateway (anything with a `url`)."""
    status, hdrs, raw = http("POST", server.url + PATH, body, {**JSON, **(headers or {})}, timeout=timeout)
    assert hdrs["Content-Type"].startswith("application/json"), (status, hdrs, raw[:200])
    return status, hdrs, json.loads(raw)


def encoded(value) -> bytes:
    return json.dumps(value, ensure_ascii=False).encode()


def check_answer_numbers(answer: dict) -> None:
    """The arithmetic docs/wire.md promises for each answer type."""
    numbers = [v for k, v in answer.items() if isinstance(v, float)]
    numbers += [p for p in answer.get("probabilities", {}).values()]
    assert all(math.isfinite(x) for x in numbers)
    if answer["type"] == "noul":
        assert 0 <= answer["noul"] <= 1
        return
    probabilities = answer["probabilities"]
    n, top = len(probabilities), max(probabilities.values())
    assert sum(probabilities.values()) == pytest.approx(1)
    assert answer["confidence"] == pytest.approx((n * top - 1) / (n - 1))
    if answer["type"] == "choice":
        assert probabilities[answer["choice"]] == top
    else:
        assert list(probabilities) == [str(i) for i in range(n)]
        assert answer["score"] == pytest.approx(sum(i * p for i, p in enumerate(probabilities.values())))


@pytest.mark.fleet
def test_mixed_noul_choice_and_score_request_is_answered_in_order(fleet):
    status, headers, body = post(fleet, encoded(MIXED))
    assert status == 200, body
    assert body["model"] == "gemma-3-270m"  # the model that answered, never the alias
    assert list(body["answers"]) == ["billing", "team", "anger"]
    assert [a["type"] for a in body["answers"].values()] == ["noul", "choice", "score"]
    for answer in body["answers"].values():
        check_answer_numbers(answer)
    assert list(body["answers"]["team"]["probabilities"]) == ["billing", "tech"]
    assert body["answers"]["anger"]["legend"] == {"0": "calm", "1": "annoyed", "2": "furious"}
    assert type(body["usage"]["input_tokens"]) is int and body["usage"]["output_tokens"] == 0
    assert [k for k in body if k not in ("model", "answers", "usage")] == []


@pytest.mark.fleet
def test_choice_option_names_round_trip_byte_for_byte(fleet):
    names = [" padded ", "Ünïcödé 🚀", "tab\there", "\"quoted\""]
    status, _, body = post(fleet, encoded({**SMALL, "questions": {
        "c": {"type": "choice", "criteria": dict.fromkeys(names)},
        "s": {"type": "score", "criteria": ["low", {"level": "mid"}, ["high", 3]]}}}))
    assert status == 200, body
    assert list(body["answers"]["c"]["probabilities"]) == names
    assert body["answers"]["s"]["legend"] == {"0": "low", "1": '{"level":"mid"}', "2": '["high",3]'}
    for answer in body["answers"].values():
        check_answer_numbers(answer)


@pytest.mark.fleet
def test_usage_counts_the_shared_state_once(fleet):
    one = {**SMALL, "state": "A long state. " * 100}
    two = {**one, "questions": {"a": {"type": "noul"}, "b": {"type": "noul"}}}
    tokens = [post(fleet, encoded(body))[2]["usage"]["input_tokens"] for body in (one, two)]
    suffix = tokens[1] - tokens[0]  # the second question adds only its own suffix
    assert 0 < suffix < 30 and tokens[0] > 300


@pytest.mark.fleet
def test_1024_question_request_is_answered_in_order(fleet):
    questions = {f"q{i:04d}": {"type": "noul"} if i % 4 else {"type": "noul", "instructions": f"Is {i} mentioned?"}
                 for i in range(1024)}
    status, _, body = post(fleet, encoded({**SMALL, "questions": questions}), timeout=600)
    assert status == 200, body
    assert list(body["answers"]) == list(questions)
    assert all(0 <= a["noul"] <= 1 for a in body["answers"].values())
    # identical questions about one state get identical answers (deterministic mode)
    assert len({body["answers"][q]["noul"] for q in ("q0001", "q0002", "q0513", "q1023")}) == 1


@pytest.fixture(scope="module")
def small_answer(fleet) -> dict:
    status, _, body = post(fleet, encoded(SMALL))
    assert status == 200, body
    return body


@pytest.mark.fleet
@pytest.mark.parametrize("encoding, compress", [("gzip", gzip.compress), ("deflate", zlib.compress),
                                                ("zstd", zstd.compress)])
def test_compressed_body_gets_the_same_answer(fleet, small_answer, encoding, compress):
    status, _, body = post(fleet, compress(encoded(SMALL)), {"Content-Encoding": encoding})
    assert (status, body) == (200, small_answer)


def test_zip_bomb_gets_a_json_413(gateway):
    bomb = zlib.compressobj(wbits=16 + zlib.MAX_WBITS)
    data = b"".join(bomb.compress(bytes(1 << 20)) for _ in range(64)) + bomb.flush()  # 64 MiB of zeros
    status, _, body = post(gateway, data, {"Content-Encoding": "gzip"})
    assert status == 413 and "too large" in body["detail"]


@pytest.mark.parametrize("size", [4 * 1024 * 1024 + 1, 5 * 1024 * 1024])
def test_body_over_the_limit_gets_a_json_413(gateway, size):
    status, _, body = post(gateway, b" " * size)
    assert status == 413 and "too large" in body["detail"]


def test_unknown_content_encoding_is_a_json_400(gateway):
    status, _, body = post(gateway, b"{}", {"Content-Encoding": "br"})
    assert status == 400 and "'br'" in body["detail"]


def exchange(server, claimed: int, body: bytes, *, half_close: bool) -> bytes:
    """A POST whose Content-Length is `claimed`, written byte for byte on a fresh socket; all the
    server sends until it closes."""
    host, port = server.url.rsplit("/", 1)[-1].rsplit(":", 1)
    head = (f"POST {PATH} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Content-Length: {claimed}\r\nConnection: close\r\n\r\n").encode()
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(head + body)
        if half_close:
            sock.shutdown(socket.SHUT_WR)
        chunks = []
        while data := sock.recv(65536):
            chunks.append(data)
    return b"".join(chunks)


def test_a_lying_content_length_is_refused_without_a_traceback(gateway, caplog):
    """aiohttp's parser, not the app, meets these (docs/wire.md, Other statuses): bytes past the
    claimed length get its own 400 (text/plain); a body cut short by a client that then
    half-closes cannot be answered, since aiohttp closes the connection on that end of input.
    Neither is worth a traceback in the log."""
    caplog.set_level(logging.INFO)
    body = encoded(SMALL)
    reply = exchange(gateway, len(body) - 5, body, half_close=False)
    assert reply.split(b"\r\n", 1)[0] in (b"HTTP/1.0 400 Bad Request", b"HTTP/1.1 400 Bad Request"), reply[:200]
    assert exchange(gateway, len(body) + 10, body, half_close=True) == b""
    assert [r.getMessage() for r in caplog.records if r.exc_info or r.levelno >= logging.WARNING] == []
    (line,) = [r.getMessage() for r in caplog.records if r.name == "aiohttp.server"]
    assert line.endswith("answered 400: BadHttpMessage: Data after `Connection: close`:")


@pytest.mark.parametrize("raw", [b'{"model": "\xff"}', b'{"n": ' + b"9" * 4301 + b"}"])
def test_not_utf8_or_an_integer_over_4300_digits_is_a_400(gateway, raw):
    assert post(gateway, raw)[::2] == (400, {"detail": "There was an error parsing the body"})


def test_nan_and_lone_surrogates_get_the_reference_servers_exact_bytes(gateway):
    raw = encoded(SMALL).replace(b'"questions"', b'"x": [NaN], "questions"')
    assert http("POST", gateway.url + PATH, raw, JSON)[::2] == (422, b'{"detail":[{"loc":["body"],"msg":"Value error, '
                                                                    b'Out of range float values are not JSON compliant: '
                                                                    b'nan","type":"value_error"}]}')
    raw = encoded({**SMALL, "state": "ab@"}).replace(b"@", b"\\ud800")  # at 3 in "ab\ud800" as JSON
    assert http("POST", gateway.url + PATH, raw, JSON)[::2] == (422, (
        b'{"detail":[{"loc":["body"],"msg":"Value error, \'utf-8\' codec can\'t encode character \'\\\\ud800\' in '
        b'position 3: surrogates not allowed","type":"value_error"}]}'))
    status, _, body = http("POST", gateway.url + PATH, encoded({**SMALL, "questions": {"q@": {"type": "noul"}}})
                           .replace(b"@", b"\\ud800"), JSON)
    assert status == 200 and len(json.loads(body)["answers"]) == 1  # in a question id it is answered


def test_an_empty_state_an_unknown_model_and_a_long_noul_criterion_get_the_reference_servers_bytes(gateway):
    assert http("POST", gateway.url + PATH, encoded({**UNKNOWN_MODEL, "state": " "}), JSON)[::2] == (422, (
        b'{"detail":[{"loc":["body"],"msg":"Value error, State must not be empty","type":"value_error"},{"loc":["body",'
        b'"model"],"msg":"Unknown model \'gpt-4\': this server answers as \'gemma-3-270m\' and accepts any \'jev-*\' '
        b'alias","type":"value_error"}]}'))
    long_true = {**SMALL, "questions": {"q": {"type": "noul", "criteria": {"true": "x" * 7996}}}}
    assert http("POST", gateway.url + PATH, encoded(long_true), JSON)[::2] == (422, (
        b'{"detail":[{"loc":["body","questions","q","boolean","true_description"],"msg":"String should have at most '
        b'8000 characters","type":"string_too_long"}]}'))


def test_body_not_json_is_the_byte_exact_json_invalid_error(gateway):
    status, _, raw = http("POST", gateway.url + PATH, b'{"a":1,}', JSON)
    assert status == 422
    assert raw == (b'{"detail":[{"type":"json_invalid","loc":["body",7],"msg":"JSON decode error","input":{},'
                   b'"ctx":{"error":"Expecting property name enclosed in double quotes"}}]}')


def test_empty_body_is_missing(gateway):
    assert post(gateway, b"")[::2] == (422, {"detail": [{"type": "missing", "loc": ["body"], "msg": "Field required",
                                                       "input": None}]})


@pytest.mark.parametrize("content_type", ["application/json; charset=utf-8", "APPLICATION/JSON",
                                          "application/merge-patch+json"])
def test_json_content_types_are_parsed(gateway, content_type):
    assert post(gateway, encoded(UNKNOWN_MODEL), {"Content-Type": content_type})[::2] == (422, UNKNOWN_MODEL_ERROR)


@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded", None])
def test_other_or_missing_content_types_fail_validation_as_a_string(gateway, content_type):
    raw = encoded(SMALL)
    headers = {"Content-Type": content_type} if content_type else {}
    status, hdrs, body = http("POST", gateway.url + PATH, raw, headers)
    assert status == 422 and json.loads(body) == {"detail": [{
        "type": "model_attributes_type", "loc": ["body"],
        "msg": "Input should be a valid dictionary or object to extract fields from", "input": raw.decode()}]}


def test_utf8_bom_is_accepted(gateway):
    assert post(gateway, b"\xef\xbb\xbf" + encoded(UNKNOWN_MODEL))[::2] == (422, UNKNOWN_MODEL_ERROR)


def test_duplicate_keys_the_last_value_wins(gateway):
    raw = b'{"model": "jev-latest", "model": "gpt-4", "state": "x", "questions": {"q": {"type": "noul"}}}'
    assert post(gateway, raw)[::2] == (422, UNKNOWN_MODEL_ERROR)


def test_prompt_longer_than_the_context_is_refused_not_truncated(gateway):
    state = " ".join(f"word{i}" for i in range(12_000))  # about 36k tokens, well under 256 KB
    status, _, body = post(gateway, encoded({**SMALL, "state": state}))
    (err,) = body["detail"]
    assert status == 422 and err["loc"] == ["body"] and err["type"] == "value_error"
    assert re.fullmatch(r"Question q: \d+ tokens exceeds the context limit 8192 \(--ctx\); no truncation", err["msg"])


def test_server_timing_on_every_post_answer_up_to_the_phase_it_reached(gateway):
    cases = [(encoded(SMALL), 200, ["parse", "validate", "tokenize", "queue", "inference", "outside", "respond"]),
             (encoded(UNKNOWN_MODEL), 422, ["parse", "validate"]),
             (b"\xff", 400, ["parse"]),
             (b" " * (5 << 20), 413, ["parse"])]
    for raw, expected, phases in cases:
        status, headers, _ = http("POST", gateway.url + PATH, raw, JSON)
        assert status == expected
        timings = dict(part.split(";dur=") for part in headers["Server-Timing"].split(", "))
        assert list(timings) == [*phases, "total"]
        assert all(float(ms) >= 0 for ms in timings.values())


def test_request_id_is_echoed_or_made_and_sent_twice(gateway):
    _, headers, _ = post(gateway, encoded(UNKNOWN_MODEL), {"x-request-id": "client-id-17"})
    assert headers["x-request-id"] == headers["x-typesafe-request-id"] == "client-id-17"
    _, headers, _ = post(gateway, encoded(UNKNOWN_MODEL))
    assert headers["x-request-id"] == headers["x-typesafe-request-id"] and len(headers["x-request-id"]) >= 16


def test_authorization_header_is_ignored_without_an_api_key(gateway):
    headers = {"Authorization": "Bearer whatever-the-sdk-sends"}
    assert post(gateway, encoded(UNKNOWN_MODEL), headers)[::2] == (422, UNKNOWN_MODEL_ERROR)
    assert http("GET", gateway.url + "/v1/models", headers=headers)[0] == 200


UNAUTHORIZED = {"detail": {"error_type": "authentication_error",
                           "message": "Missing or invalid API key: send 'Authorization: Bearer <key>'"}}


@pytest.mark.parametrize("authorization", [None, "", f"Basic {API_KEY}", "Bearer wrong", f"Bearer {API_KEY}x",
                                           f"Bearer {API_KEY[:-1]}", "Bearer", "Bearer ünï"])
def test_missing_or_wrong_api_key_is_a_401(auth_gateway, authorization):
    headers = {"Authorization": authorization} if authorization is not None else {}
    status, hdrs, body = post(auth_gateway, encoded(SMALL), headers)
    assert (status, body) == (401, UNAUTHORIZED)
    assert hdrs["WWW-Authenticate"] == "Bearer"
    status, _, raw = http("GET", auth_gateway.url + "/v1/models", headers=headers)
    assert (status, json.loads(raw)) == (401, UNAUTHORIZED)


@pytest.mark.parametrize("authorization", [f"Bearer {API_KEY}", f"bearer {API_KEY}", f"BEARER  {API_KEY} "])
def test_right_api_key_is_let_through(auth_gateway, authorization):
    headers = {"Authorization": authorization}
    assert post(auth_gateway, encoded(UNKNOWN_MODEL), headers)[::2] == (422, UNKNOWN_MODEL_ERROR)
    assert http("GET", auth_gateway.url + "/v1/models", headers=headers)[0] == 200


def test_health_and_metrics_need_no_api_key(auth_gateway):
    assert http("GET", auth_gateway.url + "/health")[0] == 200
    assert http("GET", auth_gateway.url + "/metrics")[0] != 401


def test_unknown_path_is_404_even_without_an_api_key(auth_gateway):
    status, _, raw = http("GET", auth_gateway.url + "/nowhere")
    assert (status, json.loads(raw)) == (404, {"detail": "Not Found"})
