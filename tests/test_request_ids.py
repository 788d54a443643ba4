"""gateway/request_ids.py, and the client's x-request-id followed through the in-process gateway
(tests/inprocess.py) to the Score its worker receives and the gateway's log."""
from __future__ import annotations

import json
import re

from client.net import http
from gateway.request_ids import request_id, unique
from jevfleet.harness.load import decision


def test_a_sane_client_id_is_used_and_anything_else_replaced():
    for sane in ("client-id-17", "0b7c9d2e-3f41-4c55-9a0e-1d2c3b4a5f60", "01HZX3K9Q7:req_4.2"):
        assert request_id({"x-request-id": sane}) == sane
    assert request_id({"x-typesafe-request-id": "ts-9"}) == "ts-9"
    assert request_id({"x-request-id": "bad id", "x-typesafe-request-id": "ts-9"}) == "ts-9"
    insane = ("", "a b", "x" * 129, "id\u00e9", "id;drop", "<script>", "a/b")
    generated = [request_id({"x-request-id": wanted}) for wanted in insane]
    assert all(re.fullmatch(r"[0-9a-f]{32}", g) for g in generated), generated  # nothing of the client's kept
    assert len(set(generated)) == len(insane)  # a fresh random id each time, not one made from the input


def test_an_id_already_in_flight_gets_a_suffix():
    assert unique("r1", {}) == "r1"
    twin = unique("r1", {"r1": object()})
    assert twin.startswith("r1.") and len(twin) == 11


def test_the_clients_id_reaches_the_worker_and_the_log(gateway, caplog):
    with caplog.at_level("INFO", logger="jevfleet.gateway"):
        for sent, expected in (("trace-me-1", "trace-me-1"), ("not sane!", None)):
            status, headers, raw = http("POST", gateway.url + "/v1/systemone", json.dumps(decision("Ok.")).encode(),
                                        {"Content-Type": "application/json", "x-request-id": sent})
            assert status == 200, raw
            rid = headers["x-request-id"]
            assert rid == headers["x-typesafe-request-id"] == gateway.worker.answered[-1]
            assert rid == expected if expected else len(rid) == 32
            assert f"request {rid}: answered" in caplog.text
