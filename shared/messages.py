"""Every message between gateway and workers, defined once as typed msgspec structs.

Frames are msgpack maps {"kind": <tag>, ...fields}. The gateway's ROUTER adds the worker's
identity frame (unique to one worker process: routing_identity); the payload is always the last frame. Invariant: decode() returns a message
whose every field has its declared type, or raises ValueError; nothing half-checked gets past
it. A receiver ignores keys it does not know, so a field added with a default does not break a
peer that has not learnt it yet.
"""
from __future__ import annotations

import enum
import hashlib
import os
import struct
from collections.abc import Sequence

import msgspec


class Message(msgspec.Struct, tag_field="kind", kw_only=True):
    """The base of every message: the "kind" key names the struct (its tag)."""


class SchedulerCounters(msgspec.Struct, kw_only=True):
    """What a worker's scheduler has done since it started (worker/scheduler.py counts)."""

    batches: int = 0
    requests: int = 0
    batched_requests: int = 0  # requests that shared an engine call with another request
    tokens_read: int = 0
    expired: int = 0
    cancelled: int = 0


class SnapshotStats(msgspec.Struct, kw_only=True):
    """The state snapshot cache of a worker (worker/snapshots.py): its size and its counters."""

    kept: int = 0
    max: int = 0
    tokens: int = 0
    max_tokens: int = 0
    hits: int = 0  # prefixes that reused a kept state beyond the pinned preamble
    misses: int = 0
    reused_tokens: int = 0  # prefix tokens not read thanks to a snapshot (preamble included)
    bytes: int = 0
    relocations: int = 0  # batches that had to move kept prefixes back into position order
    ram_kept: int = 0  # prefixes saved in host memory (worker/spill.py)
    ram_bytes: int = 0
    ram_max_bytes: int = 0
    ram_hits: int = 0  # prefixes restored from host memory instead of read


class WorkerStats(SchedulerCounters, kw_only=True):
    """A worker's own figures, sent with every status; /health shows them as they are and
    /metrics exports the counters. Flat over the scheduler counters, as /health has them."""

    queued_tokens: int = 0  # its own count of its queue (the gateway keeps its own, per request)
    queued_requests: int = 0  # the running batch included
    state_snapshots: SnapshotStats = msgspec.field(default_factory=SnapshotStats)


class Ready(Message, tag="ready"):
    """Worker → gateway once the model is loaded and warm: who it is and what it serves."""

    worker_id: str
    pid: int
    cores: list[int]  # pinned to these; or, when pinned is False, the CPUs it may run on (worker/cores.py)
    serves: dict[str, str]  # shared/serving.py: the gateway admits only workers that serve its own
    snapshot_keys: frozenset[str] = frozenset()  # prefix_key of every prefix it keeps
    stats: WorkerStats = msgspec.field(default_factory=WorkerStats)
    draining: bool = False  # stopping: finishing its batch, takes no new requests
    pinned: bool = True  # False with pin_workers = 0


class Heartbeat(Ready, tag="heartbeat"):
    """Worker → gateway every heartbeat_s; carries everything Ready does, so a gateway that
    restarted learns the worker from its next beat."""


class Score(Message, tag="score"):
    """Gateway → worker: one request. The state prefix is read once and every suffix (one per
    yes/no job) continues from it; only each suffix's last token gets logits."""

    request_id: str
    prefix: list[int]
    suffixes: list[list[int]]
    yes_ids: list[int]
    no_ids: list[int]
    deadline: float  # time.time() after which the answer is useless


class Result(Message, tag="result"):
    """Worker → gateway: the yes−no logit margin per suffix (calibration is the gateway's)."""

    request_id: str
    margins: list[float]
    queue_ms: float
    run_ms: float
    batch_requests: int
    read_tokens: int


class ErrorCode(enum.StrEnum):
    """Why a worker will not answer a request."""

    EXPIRED = "expired"  # its deadline passed while it was queued
    ENGINE = "engine"  # the engine raised while reading its batch
    DRAINING = "draining"  # it reached a worker that is stopping: place it elsewhere
    CANCELLED = "cancelled"  # a Cancel found it still queued


class Error(Message, tag="error"):
    """Worker → gateway: a request that will not be answered."""

    request_id: str
    code: ErrorCode
    message: str


class Cancel(Message, tag="cancel"):
    """Gateway → worker: drop this request if it is still queued (client gone, deadline)."""

    request_id: str


class Drain(Message, tag="drain"):
    """Worker → gateway: I am stopping; these queued requests were not run, send them elsewhere."""

    worker_id: str
    request_ids: list[str]


class Ping(Message, tag="ping"):
    """Gateway → worker: no reply expected. Sent after the ROUTER saw a connection drop: the
    send fails for exactly the worker whose connection is gone, which names the dead one."""


class CannotStart(Message, tag="cannot_start"):
    """Worker → gateway instead of Ready: it failed before it was up (shared/refusal.py) and exits 2
    now; the gateway lists it in /health with the reason until a worker of that id is admitted."""

    worker_id: str
    pid: int
    reason: str  # one line


class Refuse(Message, tag="refuse"):
    """Gateway → worker, after its READY: it may not join, and why (one line). Sent to a worker whose
    id a live worker holds; it exits 2 with that reason (shared/refusal.py) and is not restarted."""

    reason: str


_ENCODER = msgspec.msgpack.Encoder()
_DECODER = msgspec.msgpack.Decoder(Ready | Heartbeat | Score | Result | Error | Cancel | Drain | Ping | CannotStart
                                   | Refuse)


def encode(msg: Message) -> bytes:
    """msgspec writes the struct's fields straight from the object: no dict, no copy of a
    Score's token lists (a measurable share of the gateway's CPU when it was done in Python)."""
    return _ENCODER.encode(msg)


def decode(frame: bytes) -> Message:
    """Raises ValueError for a frame that is not one of our messages, or whose fields do not
    have their declared types."""
    try:
        return _DECODER.decode(frame)
    except msgspec.DecodeError as exc:
        raise ValueError(f"not a fleet message: {exc}") from exc


def routing_identity(worker_id: str, pid: int) -> bytes:
    """A worker process's ZeroMQ identity: its id, its pid and 4 random bytes, so that two
    processes claiming one id are both heard and the gateway can refuse the second (gateway/membership.py)."""
    return f"{worker_id}/{pid}/{os.urandom(4).hex()}".encode()


def prefix_key(tokens: list[int]) -> str:
    """A short stable name for a token prefix. Workers list the keys of the prefixes they hold
    as snapshots (Heartbeat.snapshot_keys); the gateway computes the key of a request's prefix
    to route it to the worker that already holds it."""
    return hashlib.blake2b(struct.pack(f"<{len(tokens)}i", *tokens), digest_size=8).hexdigest()


def suffix_tokens(suffixes: list[list[int]]) -> int:
    """Tokens a worker reads for the suffixes of one prefix: their common leading tokens count
    once (worker/pieces.shared_rows reads them so). In sorted order each suffix adds what it
    does not share with the one before it. The gateway's queue bound and the scheduler's
    budget count with this."""
    ordered = sorted(suffixes)
    return sum(len(s) - common_prefix(s, before) for before, s in zip([[]] + ordered, ordered))


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the longest common prefix, by bisection over C-level slice compares."""
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    lo, hi = 0, n  # a[:lo] == b[:lo] and a[:hi] != b[:hi]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[lo:mid] == b[lo:mid]:
            lo = mid
        else:
            hi = mid
    return lo
