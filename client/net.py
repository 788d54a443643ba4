"""Talking to a server as a plain client does: blocking HTTP calls that hand back error statuses
instead of raising them (a test asserts on a 422 as on a 200), free loopback ports, and the
Server-Timing header read back into numbers."""
from __future__ import annotations

import json
import socket
import urllib.error
import urllib.request
from http.client import HTTPConnection, RemoteDisconnected
from typing import Mapping
from urllib.parse import urlsplit

from gateway.metrics import SERVER_TIMING_ENTRY


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listened on a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http(method: str, url: str, body: bytes | None = None, headers: Mapping[str, str] | None = None,
         timeout: float = 60) -> tuple[int, dict[str, str], bytes]:
    """(status, headers, body) of one request, whatever the status. Connection failures raise
    OSError (urllib.error.URLError): there is no status to hand back."""
    req = urllib.request.Request(url, data=body, method=method, headers=dict(headers or {}))
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, dict(resp.headers), resp.read()
    except urllib.error.HTTPError as err:
        return err.code, dict(err.headers), err.read()


def retry_after(headers: Mapping[str, str]) -> float | None:
    """The seconds a 429/503's Retry-After asks for (the header's name in any case), or None
    when it is absent or not a number."""
    for name, value in headers.items():
        if name.lower() == "retry-after":
            try:
                return float(value)
            except ValueError:
                return None
    return None


def retry_wait(headers: Mapping[str, str], *, most: float, default: float = 1.0) -> float:
    """Seconds to wait before trying again: the Retry-After asked for, within 0..most; `default`
    when it is absent or not a number (another server's HTTP date, say), so a client never stalls
    or crashes on it."""
    asked = retry_after(headers)
    return min(default if asked is None else max(0.0, asked), most)


def probe(method: str, url: str, body: bytes | None = None, headers: Mapping[str, str] | None = None,
          timeout: float = 5) -> tuple[int, dict[str, str], bytes]:
    """http() for checks that must not raise: status 0 and nothing else when no server answers
    (refused, reset, timed out)."""
    try:
        return http(method, url, body, headers, timeout)
    except OSError:
        return 0, {}, b""


def post_json(url: str, payload: object, headers: Mapping[str, str] | None = None,
              timeout: float = 60) -> tuple[int, dict[str, str], object]:
    """POST `payload` as JSON; (status, headers, the JSON body)."""
    status, got, raw = http("POST", url, json.dumps(payload).encode(),
                            {"Content-Type": "application/json", **(headers or {})}, timeout)
    return status, got, json.loads(raw)


class KeptConnection:
    """One HTTP connection kept open across requests, as the SDK's and Locust's clients keep
    theirs: a benchmark that times requests one by one then times no TCP handshake."""

    def __init__(self, url: str, timeout: float = 60) -> None:
        parts = urlsplit(url)
        self._conn = HTTPConnection(parts.hostname, parts.port, timeout=timeout)

    def post(self, path: str, body: bytes) -> tuple[int, dict[str, str], bytes]:
        """POST a JSON body already encoded: (status, headers, the body's bytes). A connection the
        server closed while it was idle (the gateway's keep-alive is header_timeout_s, 20 s; a
        benchmark's turns on a large model are longer) is opened again and the request sent once
        more, as pooled HTTP clients do: the server had not read it."""
        for attempt in (1, 2):
            try:
                self._conn.request("POST", path, body, {"Content-Type": "application/json"})
                resp = self._conn.getresponse()
                return resp.status, dict(resp.headers), resp.read()
            except (BrokenPipeError, ConnectionResetError, RemoteDisconnected):
                self._conn.close()
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    def post_json(self, path: str, payload: object) -> tuple[int, dict[str, str], object]:
        status, headers, raw = self.post(path, json.dumps(payload).encode())
        return status, headers, json.loads(raw)

    def close(self) -> None:
        self._conn.close()


def server_timing(headers: Mapping[str, str]) -> dict[str, float]:
    """A response's Server-Timing phases in milliseconds, read as the gateway's /metrics reads them."""
    return {name: float(ms) for name, ms in SERVER_TIMING_ENTRY.findall(headers.get("Server-Timing", ""))}
