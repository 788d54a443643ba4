"""Gateway↔worker messages: msgpack encoding and a real ZeroMQ ROUTER/DEALER round trip."""
from __future__ import annotations

import pytest
import zmq

from shared.messages import Cancel, Drain, Error, Heartbeat, Ping, Ready, Result, Score, decode, encode

SAMPLES = [
    Ready(worker_id="h/w00", pid=12, cores=[0, 1], model="m", model_sha256="ab", fingerprint="f"),
    Heartbeat(worker_id="h/w00", pid=12, cores=[0], model="m", model_sha256="ab", fingerprint="f",
              queued_tokens=40, queued_requests=2, snapshot_keys=["k"], stats={"batches": 3}, draining=True),
    Score(request_id="r1", prefix=[2, 10, 11], suffixes=[[5, 6], [7]], yes_ids=[8], no_ids=[9], deadline=1.5),
    Result(request_id="r1", margins=[0.25, -1.0], queue_ms=1.0, run_ms=2.0, batch_requests=2, read_tokens=5),
    Error(request_id="r1", code="expired", message="late"),
    Cancel(request_id="r1"),
    Drain(worker_id="h/w00", request_ids=["r2", "r3"]),
    Ping(),
]


@pytest.mark.parametrize("msg", SAMPLES, ids=lambda m: m.KIND)
def test_every_message_round_trips_through_msgpack(msg):
    back = decode(encode(msg))
    assert type(back) is type(msg)
    assert back == msg


def test_unknown_fields_from_a_newer_peer_are_ignored():
    import msgpack

    frame = msgpack.packb({"kind": "cancel", "request_id": "r9", "added_later": 1})
    assert decode(frame) == Cancel(request_id="r9")


@pytest.mark.parametrize("frame", [b"", b"\xc1", b"\x81\xa4kind\xa4nope", b"\x93\x01\x02\x03"])
def test_garbage_frames_raise_value_error(frame):
    with pytest.raises(ValueError):
        decode(frame)


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
    from shared.messages import prefix_key

    assert prefix_key([2, 10, 11]) == prefix_key([2, 10, 11])
    assert len({prefix_key([2, 10, 11]), prefix_key([2, 10]), prefix_key([2, 10, 12]), prefix_key([])}) == 4
