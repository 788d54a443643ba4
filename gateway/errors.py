"""Every error the decision API sends, as one exception type carrying its status and JSON body.

The request path (gateway/body.py, wire.py, checks.py) raises ApiError; the aiohttp app turns it
into a response and the offline `decide` command prints the same body. Shapes follow
FastAPI's, as docs/wire.md lists them (clients written for the System One API parse these).
"""
from __future__ import annotations

import json
import math
from typing import Any, Iterable

PARSE_ERROR = "There was an error parsing the body"


class ApiError(Exception):
    def __init__(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
        super().__init__(status)  # not the body: it may echo a deep or huge client value
        self.status = status
        self.body = body
        self.headers = headers or {}

    def json(self) -> str:
        return error_json(self.body)

    def __str__(self) -> str:
        text = self.json()
        return f"{self.status} {text[:300]}{'…' if len(text) > 300 else ''}"


ECHO_DEPTH = 64  # an echoed input deeper than this is cut (the parser accepts ~1000 levels)


def _printable(value: Any, depth: int = 0) -> Any:
    """A copy that strict JSON can carry: NaN/±Infinity as strings (an error may echo a client's
    NaN), containers below ECHO_DEPTH as "..." (so encoding never runs out of stack)."""
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, (dict, list)) and depth >= ECHO_DEPTH:
        return "..."
    if isinstance(value, dict):
        return {k: _printable(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list):
        return [_printable(v, depth + 1) for v in value]
    return value


def _dumps(body: Any, ascii_only: bool = False) -> str:
    return json.dumps(body, ensure_ascii=ascii_only, allow_nan=False, separators=(",", ":"))


def error_json(body: Any) -> str:
    """Compact JSON, UTF-8 as is (like Starlette's JSONResponse), never invalid JSON."""
    try:
        text = _dumps(body)
    except (ValueError, RecursionError):
        text = _dumps(_printable(body))
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate cannot be sent as UTF-8: escape it
        text = _dumps(_printable(body), ascii_only=True)
    return text


def detail(status: int, message: Any, headers: dict[str, str] | None = None) -> ApiError:
    return ApiError(status, {"detail": message}, headers)


def parse_error() -> ApiError:
    """400: bytes that are not UTF-8, an integer too long to convert, a body nested too deep to parse."""
    return detail(400, PARSE_ERROR)


def unsupported_encoding(coding: str) -> ApiError:
    return detail(400, f"Unsupported Content-Encoding {coding!r}; use gzip, deflate or zstd")


def too_large(limit: int) -> ApiError:
    return detail(413, f"Request body too large: over {limit} bytes (after decompression)")


def body_timeout(seconds: float) -> ApiError:
    """408: the body was not all in within body_timeout_s. RFC 9110 asks a server sending 408 to
    close the connection: what is left of that body could not be told from a next request."""
    return detail(408, f"Request body not received within {seconds:g} s", {"Connection": "close"})


def bodies_full(in_flight: int, cap: int) -> ApiError:
    """503 before an upload's body is read: the bodies arriving already hold the gateway's
    body_bytes_in_flight. The connection is closed: the unread body cannot be told from a next request."""
    return detail(503, {"error_type": "overloaded",
                        "message": f"the gateway is receiving {in_flight} bytes of request bodies, its limit is "
                                   f"{cap} (body_bytes_in_flight); retry"},
                  {"Retry-After": "1", "Connection": "close"})


def not_found() -> ApiError:
    return detail(404, "Not Found")


def method_not_allowed(allowed: Iterable[str]) -> ApiError:
    return detail(405, "Method Not Allowed", {"Allow": ",".join(sorted(allowed))})


def internal_error() -> ApiError:
    return detail(500, "Internal Server Error")


def unauthorized() -> ApiError:
    return detail(401, {"error_type": "authentication_error",
                        "message": "Missing or invalid API key: send 'Authorization: Bearer <key>'"},
                  {"WWW-Authenticate": "Bearer"})


def overloaded(status: int, message: str, *, retry_after: int) -> ApiError:
    """429/503; Retry-After is never 0 (clients would retry in a tight loop)."""
    return detail(status, {"error_type": "overloaded", "message": message},
                  {"Retry-After": str(max(1, retry_after))})


def _ctx_value(value: Any) -> Any:
    """FastAPI runs errors through jsonable_encoder, which turns an exception (pydantic's ctx
    "error" of a value_error) into {} — clients see exactly that, so do we."""
    return {} if isinstance(value, BaseException) else value


def schema_errors(errors: Iterable[dict[str, Any]]) -> ApiError:
    """422 with pydantic's errors, locs prefixed the way FastAPI does (["body", ...]). An input
    nested deeper than ECHO_DEPTH is echoed cut there, even when it could be encoded: a client's
    JSON parser may not go as deep as ours (a Python client calling from a deep stack does not)."""
    items = []
    for err in errors:
        echo = err.get("input")
        if isinstance(echo, (dict, list)):
            echo = _printable(echo)
        item = {"type": err["type"], "loc": ["body", *err["loc"]], "msg": err["msg"], "input": echo}
        if "ctx" in err:
            item["ctx"] = {k: _ctx_value(v) for k, v in err["ctx"].items()}
        items.append(item)
    return ApiError(422, {"detail": items})


def missing_body() -> ApiError:
    return ApiError(422, {"detail": [{"type": "missing", "loc": ["body"], "msg": "Field required", "input": None}]})


def json_invalid(position: int, message: str) -> ApiError:
    """What FastAPI answers for a body its JSON parser refuses (position in characters)."""
    return ApiError(422, {"detail": [{"type": "json_invalid", "loc": ["body", position], "msg": "JSON decode error",
                                      "input": {}, "ctx": {"error": message}}]})


def check_failed(loc: list, msg: str, kind: str = "value_error") -> ApiError:
    """The short form of the checks a schema cannot express: no input, no ctx."""
    return ApiError(422, {"detail": [{"loc": loc, "msg": msg, "type": kind}]})


def non_finite(value: float) -> ApiError:
    """NaN or ±Infinity anywhere in a body (1e400 reads as inf): what the reference's validator
    says when json.dumps(allow_nan=False) refuses the value (repr: nan, inf, -inf)."""
    return check_failed(["body"], f"Value error, Out of range float values are not JSON compliant: {value!r}")


def not_encodable(exc: UnicodeError) -> ApiError:
    """A text with a lone surrogate ("\\ud800") that cannot be tokenized, or a body that is not UTF-8."""
    return check_failed(["body"], f"Value error, {exc}" if isinstance(exc, UnicodeEncodeError) else str(exc))
