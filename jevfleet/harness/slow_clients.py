"""Clients that hold a connection open without finishing their request — an upload that stops
halfway, a connection that never says anything — and what the server did with each: the cases
the gateway's header and body timeouts exist for (gateway/reading.py).

Plain blocking sockets, so a test reads exactly what came back on the wire (an asyncio test runs
`outcome` in a thread: asyncio.to_thread).
"""
from __future__ import annotations

import json
import socket
import time
from dataclasses import dataclass, field

CLOSED = 0  # Outcome.status of a connection closed without an answer


def upload_head(length: int, path: str = "/v1/systemone") -> bytes:
    """A POST's request line and headers, announcing a JSON body of `length` bytes."""
    return (f"POST {path} HTTP/1.1\r\nHost: jevfleet\r\nContent-Type: application/json\r\n"
            f"Content-Length: {length}\r\n\r\n").encode()


def stalled_upload(length: int = 1000, sent: int = 10) -> bytes:
    """upload_head(length) and the body's first `sent` bytes."""
    return upload_head(length) + (b'{"model":"jev-latest"' + b" " * length)[:sent]


def open_connections(port: int, count: int, first: bytes = b"", host: str = "127.0.0.1") -> list[socket.socket]:
    """`count` connections, each having sent `first` (nothing when empty) and then nothing more."""
    socks = []
    for _ in range(count):
        sock = socket.create_connection((host, port), timeout=10)
        if first:
            sock.sendall(first)
        socks.append(sock)
    return socks


@dataclass
class Outcome:
    status: int  # CLOSED when the server closed the connection without an answer
    headers: dict[str, str] = field(default_factory=dict)  # names in lower case
    body: bytes = b""

    def json(self) -> object:
        return json.loads(self.body)


def _answer(data: bytes) -> Outcome | None:
    """The answer in `data` once it is whole (its Content-Length read), else None."""
    head, sep, body = data.partition(b"\r\n\r\n")
    if not sep:
        return None
    status_line, *lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines)}
    length = int(headers.get("content-length", "0"))
    if len(body) < length:
        return None
    return Outcome(int(status_line.split()[1]), headers, body[:length])


def outcome(sock: socket.socket, deadline: float) -> Outcome:
    """What the server did with this connection: its (first) answer, or CLOSED; TimeoutError if
    neither happened by `deadline` (time.monotonic()). Does not wait for a close after an answer."""
    data = b""
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError(f"no answer and not closed; received {data[:200]!r}")
        sock.settimeout(remaining)
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            continue  # the loop raises with what came
        except ConnectionResetError:
            chunk = b""
        if not chunk and not data:
            return Outcome(CLOSED)
        data += chunk
        answer = _answer(data)
        if answer is not None:
            return answer
        if not chunk:
            raise ConnectionError(f"closed in the middle of an answer: {data[:200]!r}")
