"""Gateway↔worker messages: msgpack encoding, typed decoding, and a real ZeroMQ ROUTER/DEALER round trip."""
from __future__ import annotations

import msgspec
import pytest
import zmq

from shared.messages import (Cancel, CannotStart, Drain, Error, ErrorCode, Heartbeat, Ping, Ready, Result, Score,
                             SnapshotStats, WorkerStats, decode, encode, prefix_key)

STATS = WorkerStats(batches=3, requests=7, queued_tokens=40, queued_requests=2,
                    state_snapshots=SnapshotStats(kept=2, hits=5, misses=1, bytes=1024))
SAMPLES = [
    Ready(worker_id="h/w00", pid=12, cores=[0, 1], serves={"mode": "deterministic"}),
    Heartbeat(worker_id="h/w00", pid=12, cores=[0], serves={}, snapshot_keys=frozenset({"k"}), stats=STATS,
              draining=True),
    Score(request_id="r1", prefix=[2, 10, 11], suffixes=[[5, 6], [7]], yes_ids=[8], no_ids=[9], deadline=1.5),
    Result(request_id="r1", margins=[0.25, -1.0], queue_ms=1.0, run_ms=2.0, batch_requests=2, read_tokens=5),
    Error(request_id="r1", code=ErrorCode.EXPIRED, message="late"),
    Cancel(request_id="r1"),
    Drain(worker_id="h/w00", request_ids=["r2", "r3"]),
    Ping(),
    CannotStart(worker_id="h/w01", pid=13, reason="start-up canary: deterministic mode is not deterministic here"),
]


def kind(msg) -> str:
    return type(msg).__struct_config__.tag


@pytest.mark.parametrize("msg", SAMPLES, ids=kind)
def test_every_message_round_trips_through_msgpack(msg):
    back = decode(encode(msg))
    assert type(back) is type(msg)
    assert back == msg


@pytest.mark.parametrize("msg", SAMPLES, ids=kind)
def test_the_wire_format_is_a_msgpack_map_tagged_by_kind(msg):
    frame = msgspec.msgpack.decode(encode(msg))
    assert isinstance(frame, dict) and frame["kind"] == kind(msg)


def test_a_heartbeat_carries_every_field_a_ready_does():
    assert set(Ready.__struct_fields__) <= set(Heartbeat.__struct_fields__)
    assert isinstance(decode(encode(SAMPLES[1])), Ready)


def test_unknown_fields_from_a_newer_peer_are_ignored():
    frame = msgspec.msgpack.encode({"kind": "cancel", "request_id": "r9", "added_later": 1})
    assert decode(frame) == Cancel(request_id="r9")
    beat = msgspec.msgpack.decode(encode(SAMPLES[1]))
    beat["stats"]["state_snapshots"]["added_later"] = [1, 2]
    assert decode(msgspec.msgpack.encode(beat)) == SAMPLES[1]


@pytest.mark.parametrize("frame", [b"", b"\xc1", b"\x81\xa4kind\xa4nope", b"\x93\x01\x02\x03"])
def test_garbage_frames_raise_value_error(frame):
    with pytest.raises(ValueError):
        decode(frame)


WRONG_TYPES = {
    "a token id that is text": {"kind": "score", "request_id": "r", "prefix": [1, "2"], "suffixes": [[3]],
                                "yes_ids": [4], "no_ids": [5], "deadline": 1.0},
    "a deadline that is text": {"kind": "score", "request_id": "r", "prefix": [1], "suffixes": [[3]],
                                "yes_ids": [4], "no_ids": [5], "deadline": "soon"},
    "a missing field": {"kind": "score", "request_id": "r", "prefix": [1], "suffixes": [[3]], "yes_ids": [4],
                        "no_ids": [5]},
    "a margin that is null": {"kind": "result", "request_id": "r", "margins": [None], "queue_ms": 0.0,
                              "run_ms": 0.0, "batch_requests": 1, "read_tokens": 1},
    "an error code nobody sends": {"kind": "error", "request_id": "r", "code": "too_long", "message": "m"},
    "a pid that is a bool": {"kind": "ready", "worker_id": "w", "pid": True, "cores": [0], "serves": {}},
    "stats that are not a map": {"kind": "heartbeat", "worker_id": "w", "pid": 1, "cores": [0], "serves": {},
                                 "stats": "busy"},
    "a snapshot counter that is text": {"kind": "heartbeat", "worker_id": "w", "pid": 1, "cores": [0],
                                        "serves": {}, "stats": {"state_snapshots": {"hits": "many"}}},
    "request ids that are not a list": {"kind": "drain", "worker_id": "w", "request_ids": "r1"},
}


@pytest.mark.parametrize("fields", WRONG_TYPES.values(), ids=WRONG_TYPES.keys())
def test_a_field_of_the_wrong_type_raises_value_error(fields):
    with pytest.raises(ValueError, match="not a fleet message"):
        decode(msgspec.msgpack.encode(fields))


def test_error_codes_are_the_ones_a_worker_sends():
    assert {code.value for code in ErrorCode} == {"expired", "engine", "draining", "cancelled"}
    assert decode(msgspec.msgpack.encode({"kind": "error", "request_id": "r", "code": "draining", "message": ""})).code \
        is ErrorCode.DRAINING


def test_score_and_result_cross_a_real_router_dealer_pair(tmp_path):
    ctx = zmq.Context()
    router = ctx.socket(zmq.ROUTER)
    dealer = ctx.socket(zmq.DEALER)
    try:
        endpoint = f"ipc://{tmp_path}/t.ipc"
        router.bind(endpoint)
        dealer.setsockopt_string(zmq.IDENTITY, "w-test")
        dealer.connect(endpoint)
        dealer.send(encode(SAMPLES[0]))
        identity, frame = router.recv_multipart()
        assert identity == b"w-test" and decode(frame) == SAMPLES[0]
        router.send_multipart([identity, encode(SAMPLES[2])])
        assert dealer.poll(5000) and decode(dealer.recv()) == SAMPLES[2]
        dealer.send(encode(SAMPLES[3]))
        assert decode(router.recv_multipart()[1]) == SAMPLES[3]
    finally:
        router.close(0)
        dealer.close(0)
        ctx.term()


def test_prefix_key_is_stable_and_tells_prefixes_apart():
    assert prefix_key([2, 10, 11]) == prefix_key([2, 10, 11])
    assert len({prefix_key([2, 10, 11]), prefix_key([2, 10]), prefix_key([2, 10, 12]), prefix_key([])}) == 4
