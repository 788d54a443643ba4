"""worker/outbox.py over real ZeroMQ: a ROUTER that does not read, small queues, big messages."""
from __future__ import annotations

import time

import zmq

from worker.outbox import Outbox


def pair(tmp_path):
    ctx = zmq.Context()
    router, dealer = ctx.socket(zmq.ROUTER), ctx.socket(zmq.DEALER)
    router.setsockopt(zmq.RCVHWM, 2)
    dealer.setsockopt(zmq.SNDHWM, 2)
    for sock in (router, dealer):
        sock.setsockopt(zmq.LINGER, 0)
    router.bind(f"ipc://{tmp_path}/o.ipc")
    dealer.connect(f"ipc://{tmp_path}/o.ipc")
    return ctx, router, dealer


def test_held_messages_go_in_order_and_the_newest_beat_overtakes_them(tmp_path):
    """A gateway that stops reading and then reads a backlog must hear a beat before the answers
    held meanwhile, or it takes the worker for silent: the beat goes first once ZeroMQ takes a
    message, right after what ZeroMQ had taken already, and only the newest of the beats."""
    ctx, router, dealer = pair(tmp_path)
    try:
        outbox = Outbox(dealer, limit=10_000)
        frames = [i.to_bytes(4, "big") * 16384 for i in range(200)]  # 64 KiB each, 12.5 MiB in all
        for frame in frames:
            outbox.send(frame)
        assert outbox.held and not outbox.full  # past what ZeroMQ and the socket buffers took
        taken = len(frames) - len(outbox.held)
        outbox.send_status(b"beat 1")
        outbox.send_status(b"beat 2")  # replaces beat 1, which says the same, older
        got, deadline = [], time.monotonic() + 60
        while (outbox.waiting or router.poll(200)) and time.monotonic() < deadline:  # till all is read
            while router.poll(0):
                got.append(router.recv_multipart()[-1])
            if dealer.poll(100, zmq.POLLOUT):
                outbox.flush()
        assert [g for g in got if not g.startswith(b"beat")] == frames  # the answers in order, each once
        assert [g for g in got if g.startswith(b"beat")] == [b"beat 2"]  # beat 1 was never sent
        assert got.index(b"beat 2") == taken  # ahead of every held answer
    finally:
        router.close()
        dealer.close()
        ctx.term()


def test_a_beat_goes_at_once_when_nothing_waits(tmp_path):
    ctx, router, dealer = pair(tmp_path)
    try:
        outbox = Outbox(dealer)
        assert dealer.poll(2000, zmq.POLLOUT)  # connected: ZeroMQ takes a message now
        outbox.send_status(b"beat")
        assert not outbox.waiting and router.poll(2000) and router.recv_multipart()[-1] == b"beat"
    finally:
        router.close()
        dealer.close()
        ctx.term()


def test_full_means_the_limit_is_reached(tmp_path):
    ctx, router, dealer = pair(tmp_path)
    try:
        outbox = Outbox(dealer, limit=50)
        while not outbox.full:
            outbox.send(b"x" * 65536)
        assert len(outbox.held) == 50
        assert not outbox.flush_for(0.05)  # nobody reads 3 MiB more: it gives up at the deadline
    finally:
        router.close()
        dealer.close()
        ctx.term()
