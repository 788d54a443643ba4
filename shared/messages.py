"""Every message between gateway and workers, defined once, with its msgpack encoding.

Frames are msgpack maps {"kind": <tag>, ...fields}. The gateway's ROUTER adds the worker's
identity frame; the payload is always the last frame. A field added with a default stays
readable by an older peer, which ignores keys it does not know.
"""
from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar

import msgpack


@dataclass(kw_only=True)
class Ready:
    """Worker → gateway once the model is loaded and warm: who it is and what it serves."""

    KIND: ClassVar[str] = "ready"
    worker_id: str
    pid: int
    cores: list[int]
    model: str
    model_sha256: str
    fingerprint: str
    queued_tokens: int = 0
    queued_requests: int = 0
    snapshot_keys: list[str] = field(default_factory=list)
    stats: dict[str, Any] = field(default_factory=dict)
    draining: bool = False  # stopping: finishing its batch, takes no new requests
    serves: dict[str, str] = field(default_factory=dict)  # shared/serving.py: the gateway admits only its own


@dataclass(kw_only=True)
class Heartbeat(Ready):
    """Worker → gateway every heartbeat_s; carries everything Ready does, so a gateway that
    restarted learns the worker from its next beat."""

    KIND: ClassVar[str] = "heartbeat"


@dataclass(kw_only=True)
class Score:
    """Gateway → worker: one request. The state prefix is read once and every suffix (one per
    yes/no job) continues from it; only each suffix's last token gets logits."""

    KIND: ClassVar[str] = "score"
    request_id: str
    prefix: list[int]
    suffixes: list[list[int]]
    yes_ids: list[int]
    no_ids: list[int]
    deadline: float  # time.time() after which the answer is useless


@dataclass(kw_only=True)
class Result:
    """Worker → gateway: the yes−no logit margin per suffix (calibration is the gateway's)."""

    KIND: ClassVar[str] = "result"
    request_id: str
    margins: list[float]
    queue_ms: float
    run_ms: float
    batch_requests: int
    read_tokens: int
    reused_tokens: int = 0


@dataclass(kw_only=True)
class Error:
    """Worker → gateway: a request that will not be answered (expired, too long, engine fault)."""

    KIND: ClassVar[str] = "error"
    request_id: str
    code: str  # "expired" | "too_long" | "engine" | "draining" | "cancelled" (a Cancel found it queued)
    message: str


@dataclass(kw_only=True)
class Cancel:
    """Gateway → worker: drop this request if it is still queued (client gone, deadline)."""

    KIND: ClassVar[str] = "cancel"
    request_id: str


@dataclass(kw_only=True)
class Drain:
    """Worker → gateway: I am stopping; these queued requests were not run, send them elsewhere."""

    KIND: ClassVar[str] = "drain"
    worker_id: str
    request_ids: list[str]


@dataclass(kw_only=True)
class Ping:
    """Gateway → worker: no reply expected. Sent after the ROUTER saw a connection drop: the
    send fails for exactly the worker whose connection is gone, which names the dead one."""

    KIND: ClassVar[str] = "ping"


Message = Ready | Heartbeat | Score | Result | Error | Cancel | Drain | Ping
_BY_KIND: dict[str, type] = {cls.KIND: cls for cls in (Ready, Heartbeat, Score, Result, Error, Cancel, Drain, Ping)}


def encode(msg: Message) -> bytes:
    """Fields are read as they are (msgpack walks nested lists and dicts itself): dataclasses'
    asdict would deep-copy a Score's token lists first, a measurable share of the gateway's CPU."""
    return msgpack.packb({"kind": msg.KIND, **{f.name: getattr(msg, f.name) for f in fields(msg)}},
                         use_bin_type=True)


def decode(frame: bytes) -> Message:
    """Raises ValueError for a frame that is not one of our messages."""
    try:
        data = msgpack.unpackb(frame, raw=False)
        cls = _BY_KIND[data.pop("kind")]
    except (msgpack.UnpackException, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"not a fleet message: {exc!r}") from exc
    known = {f.name for f in fields(cls)}
    return cls(**{k: v for k, v in data.items() if k in known})


def prefix_key(tokens: list[int]) -> str:
    """A short stable name for a token prefix. Workers list the keys of the prefixes they hold
    as snapshots (Heartbeat.snapshot_keys); the gateway computes the key of a request's prefix
    to route it to the worker that already holds it."""
    return hashlib.blake2b(struct.pack(f"<{len(tokens)}i", *tokens), digest_size=8).hexdigest()
