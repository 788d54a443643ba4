"""Never a 5xx for client input: thousands of random and mutated bodies, content types and
encodings over HTTP. Every answer must be 200/400/413/422 with a JSON body, within HANG_S.

The thousands go to the in-process gateway (tests/inprocess.py: the product's request path, a
scripted worker, no model). Mutated bodies carry a poison question whose prompt is longer than
the context: everything else about them is still parsed, validated, rendered and tokenized, but
they stop before inference. A few valid requests with odd text go all the way on the real fleet.
`make fuzz` sends about 10,000 (JEV_FUZZ_SCALE=4) to the real fleet instead (JEV_FUZZ_FLEET=1),
checks that no worker restarted, and prints the tally.
"""
from __future__ import annotations

import gzip
import http.client
import json
import math
import os
import socket
import sys
import zlib
from collections import Counter
from functools import lru_cache
from urllib.parse import urlsplit

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.wire import MAX_DEPTH
from jevfleet.harness.load import workers

if sys.version_info >= (3, 14):
    from compression import zstd
else:
    from backports import zstd

PATH = "/v1/systemone"
ALLOWED = {200, 400, 413, 422}
FUZZ = settings(deadline=None, suppress_health_check=list(HealthCheck), print_blob=True)
SCALE = float(os.environ.get("JEV_FUZZ_SCALE", "1"))  # `make fuzz`: 4
AGAINST_FLEET = os.environ.get("JEV_FUZZ_FLEET") == "1"  # `make fuzz`: the real fleet, not the in-process gateway
if AGAINST_FLEET:
    pytestmark = pytest.mark.fleet
HANG_S = 60  # an answer later than this is a hang (the fleet is shared with nothing else here)
TALLY: Counter = Counter()  # status -> responses, printed at the end


def examples(n: int) -> int:
    return max(1, int(n * SCALE))
# 7999 characters (under the text limit) but 20,000 tokens: refused after tokenizing, before inference
POISON = {"type": "noul", "instructions": "\U0001F701 " * 4000}


class Client:
    """One keep-alive HTTP connection, reopened when the server closes it (e.g. after a 413)."""

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        self.host, self.port = parts.hostname, parts.port
        self.conn: http.client.HTTPConnection | None = None

    def post(self, body: bytes, headers: dict[str, str]) -> tuple[int, http.client.HTTPResponse, bytes]:
        for attempt in range(2):
            if self.conn is None:
                self.conn = http.client.HTTPConnection(self.host, self.port, timeout=HANG_S)
            try:
                self.conn.request("POST", PATH, body=body, headers=headers)
                resp = self.conn.getresponse()
                raw = resp.read()
            except (http.client.HTTPException, ConnectionError):
                self.conn.close()
                self.conn = None
                if attempt:
                    raise
                continue
            if resp.will_close:
                self.conn.close()
                self.conn = None
            return resp.status, resp, raw
        raise AssertionError("not reached")


START_PIDS: dict[str, int] = {}


@pytest.fixture(scope="module")
def client(request) -> Client:
    """The in-process gateway; the real fleet under `make fuzz`."""
    target = request.getfixturevalue("fleet" if AGAINST_FLEET else "gateway")
    if AGAINST_FLEET:
        START_PIDS.update({w: s["pid"] for w, s in workers(target).items()})
    return Client(target.url)


@pytest.fixture(scope="module")
def fleet_client(fleet) -> Client:
    return Client(fleet.url)


def check(status: int, resp: http.client.HTTPResponse, raw: bytes) -> None:
    TALLY[status] += 1
    assert status in ALLOWED, (status, raw[:500])
    assert resp.getheader("Content-Type", "").startswith("application/json"), resp.getheaders()
    body = json.loads(raw.decode("utf-8"), parse_constant=lambda c: pytest.fail(f"{c} in a response"))
    assert resp.getheader("x-request-id") and "total;dur=" in resp.getheader("Server-Timing", "")
    if status == 200:
        assert set(body) >= {"model", "answers", "usage"}
        for answer in body["answers"].values():
            for value in answer.values():
                assert not isinstance(value, float) or math.isfinite(value)
    else:
        assert "detail" in body


# --- strategies -------------------------------------------------------------------------
odd_text = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=12) | st.sampled_from(
    ["", " ", "\u0000", "\ufeff", "\u202e", "🚀", "e\u0301", "\uffff", "jev-", "noul", "choice", "score", "x" * 300])
scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | odd_text
json_values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4) |
                           st.dictionaries(odd_text, inner, max_size=4), max_leaves=12)

BASES = [
    {"model": "jev-latest", "state": "Ok.", "questions": {"q": {"type": "noul", "instructions": "Yes?"}}},
    {"model": "jev-1", "state": {"order": 1}, "questions": {"c": {"type": "choice", "criteria": {"a": None, "b": "B"}}}},
    {"model": "gemma-3-270m", "state": ["x"], "questions": {
        "s": {"type": "score", "instructions": None, "criteria": ["lo", {"mid": 1}, ["hi"]]},
        "n": {"type": "noul", "criteria": {"true": "t", "false": None}}}},
]


def paths(value, prefix=()):
    """Every path into a JSON value (the value itself included)."""
    yield prefix
    if isinstance(value, dict):
        for k, v in value.items():
            yield from paths(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from paths(v, (*prefix, i))


def mutate(value, path, action, new):
    if not path:
        return new if action == "replace" else value
    head, rest = path[0], path[1:]
    if isinstance(value, dict):
        out = dict(value)
        if not rest and action == "delete":
            del out[head]
        elif not rest and action == "add":
            out[f"{head}_extra"] = new
        else:
            out[head] = mutate(value[head], rest, action, new)
        return out
    out = list(value)
    if not rest and action == "delete":
        del out[head]
    elif not rest and action == "add":
        out.insert(head, new)
    else:
        out[head] = mutate(value[head], rest, action, new)
    return out


@st.composite
def mutated_bodies(draw) -> dict:
    """1–3 random edits of a valid request, poisoned."""
    base = draw(st.sampled_from(BASES))
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(list(paths(base))))
        base = mutate(base, path, draw(st.sampled_from(["replace", "delete", "add"])), draw(json_values))
    return poisoned(base)


def poisoned(body):
    if isinstance(body, dict) and isinstance(body.get("questions"), dict):
        return {**body, "questions": {**body["questions"], "zz-poison": POISON}}
    return body


CONTENT_TYPES = st.sampled_from(["application/json", "application/json; charset=utf-8", "APPLICATION/JSON",
                                 "application/problem+json", "text/plain", "application/x-www-form-urlencoded",
                                 "multipart/form-data; boundary=x", "application/json; charset=latin-1", "", "json",
                                 "application/", ";;;"]) | st.text(st.characters(min_codepoint=32, max_codepoint=126),
                                                                   max_size=30)
ENCODINGS = {"gzip": gzip.compress, "deflate": zlib.compress, "zstd": zstd.compress}


@st.composite
def transports(draw, body: bytes) -> tuple[bytes, dict[str, str]]:
    """Random content type and encoding; the body compressed to match, or claimed but not."""
    headers = {}
    content_type = draw(CONTENT_TYPES)
    if content_type or draw(st.booleans()):
        headers["Content-Type"] = content_type
    coding = draw(st.sampled_from([None, None, "gzip", "deflate", "zstd", "identity", "br", "gzip, zstd", "x-bogus"]))
    if coding is not None:
        headers["Content-Encoding"] = coding
        if coding in ENCODINGS and draw(st.integers(0, 4)):
            body = ENCODINGS[coding](body)
        elif coding == "gzip, zstd":
            body = zstd.compress(gzip.compress(body))
    return body, headers


def raw_mutation(data: bytes, draw) -> bytes:
    kind = draw(st.sampled_from(["flip", "truncate", "insert", "as is"]))
    if not data or kind == "as is":
        return data
    at = draw(st.integers(0, len(data) - 1))
    if kind == "flip":
        return data[:at] + bytes([data[at] ^ draw(st.integers(1, 255))]) + data[at + 1:]
    if kind == "truncate":
        return data[:at]
    return data[:at] + draw(st.binary(min_size=1, max_size=8)) + data[at:]


# --- properties ---------------------------------------------------------------------------
@settings(FUZZ, max_examples=examples(700))
@given(json_values)
def test_random_json_bodies_never_get_a_5xx(client, value):
    check(*client.post(json.dumps(value).encode(), {"Content-Type": "application/json"}))


@settings(FUZZ, max_examples=examples(800))
@given(mutated_bodies())
def test_mutated_requests_wrong_types_at_every_field_never_get_a_5xx(client, body):
    check(*client.post(json.dumps(body, ensure_ascii=False).encode(), {"Content-Type": "application/json"}))


@settings(FUZZ, max_examples=examples(500))
@given(st.data())
def test_broken_bytes_odd_numbers_and_deep_nesting_never_get_a_5xx(client, data):
    kind = data.draw(st.sampled_from(["binary", "mutated json", "deep", "number", "escape"]))
    if kind == "binary":
        raw = data.draw(st.binary(max_size=300))
    elif kind == "mutated json":
        raw = raw_mutation(json.dumps(data.draw(mutated_bodies()), ensure_ascii=False).encode(), data.draw)
    elif kind == "deep":
        depth = data.draw(st.integers(MAX_DEPTH + 1, 5000))  # 98 deep is fine but costs model time
        opener, closer = data.draw(st.sampled_from([("[", "]"), ('{"a":', "}")]))
        raw = json.dumps({**BASES[0], "state": "STATE"}).encode().replace(
            b'"STATE"', (opener * depth + "1" + closer * depth).encode())
    elif kind == "number":
        number = data.draw(st.sampled_from(["1" * 4301, "-" + "9" * 5000, "1e999999", "-1e400", "NaN", "Infinity",
                                            "0." + "1" * 10000, "1" * 4300]))
        raw = json.dumps(poisoned(BASES[1])).encode().replace(b'{"order": 1}', ('{"order": %s}' % number).encode())
    else:
        escape = data.draw(st.sampled_from(["\\ud800", "\\udfff", "\\ud83d\\ude80", "\\u0000", "\\uffff", "\\x41"]))
        raw = json.dumps(poisoned(BASES[0])).encode().replace(b"Ok.", escape.encode())
    check(*client.post(raw, {"Content-Type": "application/json"}))


@settings(FUZZ, max_examples=examples(500))
@given(st.data())
def test_random_content_types_and_encodings_never_get_a_5xx(client, data):
    body = json.dumps(data.draw(mutated_bodies()), ensure_ascii=False).encode()
    check(*client.post(*data.draw(transports(body))))


@pytest.mark.fleet
@settings(FUZZ, max_examples=examples(8))
@given(odd_text.filter(str.strip), odd_text.filter(lambda t: 0 < len(t.strip()) <= 128 and t != "c"),
       odd_text.filter(lambda t: t.strip() and t != "other"), odd_text)
def test_valid_requests_with_odd_text_are_answered(fleet_client, state, qid, option, instructions):
    body = {"model": "jev-latest", "state": state, "questions": {
        qid: {"type": "noul", "instructions": instructions},
        "c": {"type": "choice", "instructions": instructions, "criteria": {option: instructions, "other": None}}}}
    status, resp, raw = fleet_client.post(json.dumps(body, ensure_ascii=False).encode(),
                                          {"Content-Type": "application/json"})
    check(status, resp, raw)
    assert status == 200, raw
    answers = json.loads(raw)["answers"]
    assert list(answers) == list(body["questions"]) and list(answers["c"]["probabilities"]) == [option, "other"]


# --- transport-level abuse: compression bombs, lying Content-Length, other text encodings ---------
@lru_cache(maxsize=None)
def bomb(coding: str) -> bytes:
    """256 MiB of zeros in a few hundred KB, made once, streamed (never held whole)."""
    chunk = b"\0" * (1 << 20)
    if coding == "zstd":
        c = zstd.ZstdCompressor()
        return b"".join(c.compress(chunk) for _ in range(256)) + c.flush()
    c = zlib.compressobj(wbits=16 + zlib.MAX_WBITS)
    return b"".join(c.compress(chunk) for _ in range(256)) + c.flush()


def raw_exchange(client: Client, head: bytes, body: bytes) -> bytes:
    """One request written byte for byte on a fresh socket, whose writing side is then closed;
    everything the server sends until it closes ("" if nothing)."""
    with socket.create_connection((client.host, client.port), timeout=HANG_S) as sock:
        sock.sendall(head + body)
        sock.shutdown(socket.SHUT_WR)
        chunks = []
        while data := sock.recv(65536):
            chunks.append(data)
        return b"".join(chunks)


@settings(FUZZ, max_examples=examples(60))
@given(st.data())
def test_bombs_lying_lengths_and_other_text_encodings_never_get_a_5xx(client, data):
    kind = data.draw(st.sampled_from(["gzip bomb", "zstd bomb", "short length", "long length", "encoding"]))
    body = json.dumps(data.draw(mutated_bodies()), ensure_ascii=False).encode()
    if kind.endswith("bomb"):
        coding = kind.split()[0]
        check(*client.post(bomb(coding), {"Content-Type": "application/json", "Content-Encoding": coding}))
    elif kind == "encoding":
        codec = data.draw(st.sampled_from(["utf-16", "utf-32", "latin-1", "cp1252", "utf-8-sig"]))
        text = body.decode("utf-8").encode(codec, "replace")
        check(*client.post(text, {"Content-Type": data.draw(st.sampled_from(["application/json", "text/plain"]))}))
    else:  # Content-Length shorter or longer than the body, the connection then half-closed
        claimed = max(0, len(body) + data.draw(st.integers(-len(body), -1) if kind == "short length"
                                               else st.integers(1, 10_000)))
        head = (f"POST {PATH} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                f"Content-Length: {claimed}\r\nConnection: close\r\n\r\n").encode()
        reply = raw_exchange(client, head, body)
        TALLY["raw " + (reply[9:12].decode() if reply else "closed")] += 1
        assert not reply or reply[9:10] in (b"2", b"4"), reply[:300]  # an answer or a closed connection


def test_no_worker_restarted_and_the_tally(request, client):
    """Runs last in this module: against the real fleet, the workers that answered the fuzz are
    the ones that started it."""
    if AGAINST_FLEET:
        fleet = request.getfixturevalue("fleet")
        now = {w: s["pid"] for w, s in workers(fleet).items()}
        assert now == START_PIDS, (START_PIDS, now)
        assert all(s["state"] == "up" for s in workers(fleet).values())
    total = sum(v for k, v in TALLY.items() if isinstance(k, int))
    print(f"\nfuzz (scale {SCALE}): {total} HTTP answers {dict(sorted((k, v) for k, v in TALLY.items() if isinstance(k, int)))}"
          f", raw exchanges {dict(sorted((k, v) for k, v in TALLY.items() if isinstance(k, str)))}; "
          f"0 >= 500, 0 hangs (each within {HANG_S} s)" + (", 0 worker restarts" if AGAINST_FLEET else ""))
