"""worker/outbox.py over real ZeroMQ: a ROUTER that does not read, small queues, big messages."""
from __future__ import annotations

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


def test_held_messages_go_in_order_once_the_reader_reads_and_beats_are_skipped_meanwhile(tmp_path):
    ctx, router, dealer = pair(tmp_path)
    try:
        outbox = Outbox(dealer, limit=10_000)
        frames = [i.to_bytes(4, "big") * 16384 for i in range(200)]  # 64 KiB each, 12.5 MiB in all
        for frame in frames:
            outbox.send(frame)
        assert outbox.held and not outbox.full  # past what ZeroMQ and the socket buffers took
        outbox.send_status(b"beat")  # skipped: it would overtake held answers
        got = []
        while len(got) < len(frames):
            if router.poll(2000):
                got.append(router.recv_multipart()[-1])
            if dealer.poll(0, zmq.POLLOUT):
                outbox.flush()
        assert got == frames and not outbox.held
        assert not router.poll(200)  # the skipped beat was never sent
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
