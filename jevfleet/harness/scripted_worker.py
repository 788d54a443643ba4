"""A scripted stand-in for a worker process: a real DEALER speaking the real messages
(shared/messages.py), so the gateway is tested and benchmarked over real ZeroMQ without a model.

A test double, never part of the product: the tests script it message by message (tests/test_fleet.py)
or let it answer every job at once (the in-process gateway of tests/inprocess.py, and
bench/instant_worker.py, whose many instant workers measure how many a gateway can feed). Its
answers are made up: one given margin for every suffix.
"""
from __future__ import annotations

import asyncio

import zmq
import zmq.asyncio
from zmq.utils.monitor import parse_monitor_message

from shared.messages import Heartbeat, Message, Ping, Ready, Result, Score, decode, encode, routing_identity


HANDSHAKE_ENDS = (zmq.EVENT_HANDSHAKE_SUCCEEDED | zmq.EVENT_HANDSHAKE_FAILED_AUTH | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
                  | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL)


class ScriptedWorker:
    def __init__(self, ctx: zmq.asyncio.Context, endpoint: str, worker_id: str, *, pid: int = 100,
                 cores: tuple[int, ...] = (0,), keys=None, serves: dict[str, str] | None = None,
                 watch_handshake: bool = False) -> None:
        """watch_handshake: record how the link's handshakes end, for handshake()."""
        self.worker_id, self.pid, self.cores = worker_id, pid, list(cores)
        self.serves = serves or {}
        self.answered: list[str] = []  # request ids, by answer_every_score
        self.sock = ctx.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.IDENTITY, routing_identity(worker_id, pid))  # as a real worker's
        self.sock.setsockopt(zmq.LINGER, 0)
        if keys is not None:
            keys.apply(self.sock)
        self._handshakes = self.sock.get_monitor_socket(HANDSHAKE_ENDS) if watch_handshake else None
        self.sock.connect(endpoint)
        self.snapshot_keys: list[str] = []
        self._beat: asyncio.Task | None = None

    def status(self, kind: type[Ready] = Heartbeat, **extra) -> Ready:
        return kind(worker_id=self.worker_id, pid=self.pid, cores=self.cores, serves=self.serves,
                    snapshot_keys=frozenset(self.snapshot_keys), **extra)

    async def send(self, msg: Message) -> None:
        await self.sock.send(encode(msg))

    async def start(self, beat_s: float = 0.05) -> ScriptedWorker:
        """Say READY, then heartbeat until stop_beating()."""
        await self.send(self.status(Ready))

        async def beat() -> None:
            while True:
                await asyncio.sleep(beat_s)
                await self.send(self.status())

        self._beat = asyncio.create_task(beat())
        return self

    async def handshake(self, timeout: float = 3.0) -> bool:
        """Whether the first handshake with the gateway succeeded (False: refused, e.g. a key it
        does not accept or no CURVE where it requires it); an event, not a guess from silence."""
        async with asyncio.timeout(timeout):
            event = parse_monitor_message(await self._handshakes.recv_multipart())["event"]
        return event == zmq.EVENT_HANDSHAKE_SUCCEEDED

    def stop_beating(self) -> None:
        if self._beat is not None:
            self._beat.cancel()

    async def recv(self, timeout: float | None = 3.0) -> Message:
        """The next message other than a Ping."""
        async with asyncio.timeout(timeout):
            while True:
                msg = decode(await self.sock.recv())
                if not isinstance(msg, Ping):
                    return msg

    async def nothing_for(self, seconds: float) -> bool:
        try:
            await self.recv(seconds)
        except TimeoutError:
            return True
        return False

    async def answer(self, score: Score, margin: float = 1.0, read: int = 100, run_ms: float = 100.0) -> None:
        await self.send(Result(request_id=score.request_id, margins=[margin] * len(score.suffixes), queue_ms=0.0,
                               run_ms=run_ms, batch_requests=1, read_tokens=read))

    async def answer_every_score(self, margin: float = 0.0) -> None:
        """Answer each Score at once with `margin` for every suffix, until cancelled: the worker
        behind an in-process or benchmarked gateway. Cancels find nothing left to withdraw."""
        while True:
            msg = await self.recv(timeout=None)
            if isinstance(msg, Score):
                self.answered.append(msg.request_id)
                await self.answer(msg, margin, read=len(msg.prefix) + sum(map(len, msg.suffixes)), run_ms=0.0)

    def close(self) -> None:
        self.stop_beating()
        if self._handshakes is not None:
            self.sock.disable_monitor()
            self._handshakes.close(linger=0)
        self.sock.close(linger=0)
