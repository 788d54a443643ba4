"""The id a decision request is known by in the gateway's log, in the messages to its worker,
and in the response's x-request-id: the client's own, if it sent a sane one, so one request can
be followed across processes; a generated one otherwise.

Sane: 1 to 128 characters of letters, digits and . _ : - (UUIDs, ULIDs, "req_7f3a..."), which is
safe in a log line and a header. Anything else is not used, not even in part.
"""
from __future__ import annotations

import re
import uuid
from typing import Mapping

SANE = re.compile(r"[A-Za-z0-9._:-]{1,128}")
HEADERS = ("x-request-id", "x-typesafe-request-id")  # read in this order; both are answered


def request_id(headers: Mapping[str, str]) -> str:
    """The first request-id header that is sane, else a new random id (32 hex digits)."""
    for name in HEADERS:
        wanted = headers.get(name)
        if wanted is not None and SANE.fullmatch(wanted):
            return wanted
    return uuid.uuid4().hex


def unique(wanted: str, taken: Mapping[str, object]) -> str:
    """`wanted`, or `wanted` with a random suffix while a request of that id is still in flight
    (two clients may send the same id; the fleet needs them apart)."""
    return wanted if wanted not in taken else f"{wanted}.{uuid.uuid4().hex[:8]}"
