"""From the bytes of a request body to the value the schema validates, the way FastAPI reads it.

- Content-Encoding gzip, deflate or zstd is undone here, never by the HTTP server: the size
  limit is enforced while decompressing, so a zip bomb costs at most `limit` bytes of memory.
- JSON content types (application/json, any +json, any case) are parsed; any other or no
  content type leaves the body as a string, which then fails validation like FastAPI's does.
- A JSON body that is not UTF-8, an integer of more than 4300 digits, or nesting too deep for
  the parser (about 1000 levels; fields allow 98, see wire.MAX_DEPTH): 400. Not JSON: 422
  json_invalid with the character position. NaN or ±Infinity anywhere (1e400 reads as inf):
  422 naming the first. A lone surrogate escape parses; checks.py refuses it where it would be
  tokenized. Another content type that is not UTF-8: 422 with Python's decoding error.

No HTTP types here: the offline `decide` command reads a request file through the same code.
"""
from __future__ import annotations

import email.message
import json
import math
import sys
import zlib
from typing import Any

if sys.version_info >= (3, 14):
    from compression.zstd import DecompressionParameter, ZstdDecompressor, ZstdError
else:
    from backports.zstd import DecompressionParameter, ZstdDecompressor, ZstdError

from gateway.errors import json_invalid, not_encodable, parse_error, too_large, unsupported_encoding
from gateway.errors import non_finite as non_finite_error


def is_json_content_type(value: str | None) -> bool:
    """FastAPI's rule: application/json or application/*+json, parameters and case ignored."""
    if not value:
        return False
    message = email.message.Message()
    message["content-type"] = value
    if message.get_content_maintype() != "application":
        return False
    subtype = message.get_content_subtype()
    return subtype == "json" or subtype.endswith("+json")


def _inflate(data: bytes, wbits: int, limit: int, *, members: bool) -> bytes:
    """zlib/gzip/raw deflate, at most `limit` bytes out; `members`: gzip may concatenate several."""
    out = bytearray()
    while True:
        d = zlib.decompressobj(wbits)
        while not d.eof:
            chunk = d.decompress(data, limit + 1 - len(out))
            out += chunk
            if len(out) > limit:
                raise too_large(limit)
            if not chunk and d.unconsumed_tail == data and not d.eof:
                raise parse_error()  # no progress: the input ended inside the stream
            data = d.unconsumed_tail
        data = d.unused_data
        if not data:
            return bytes(out)
        if not members:
            raise parse_error()  # trailing bytes after the stream


def _unzstd(data: bytes, limit: int) -> bytes:
    """One or more zstd frames, at most `limit` bytes out. Windows up to max(8 MiB, limit) are
    accepted (RFC 8878 asks decoders for 8 MiB); a frame asking for more is refused, not allocated."""
    window_log = max(23, min(31, limit.bit_length()))
    out = bytearray()
    while data:
        d = ZstdDecompressor(options={DecompressionParameter.window_log_max: window_log})
        while not d.eof:
            chunk = d.decompress(data, limit + 1 - len(out))
            data = b""
            out += chunk
            if len(out) > limit:
                raise too_large(limit)
            if not chunk and d.needs_input and not d.eof:
                raise parse_error()  # input ended inside a frame
        data = d.unused_data
    return bytes(out)


def _decode_one(data: bytes, coding: str, limit: int) -> bytes:
    try:
        if coding == "gzip" or coding == "x-gzip":
            return _inflate(data, 16 + zlib.MAX_WBITS, limit, members=True)
        if coding == "deflate":  # RFC 9110 says zlib-wrapped; some clients send raw deflate
            try:
                return _inflate(data, zlib.MAX_WBITS, limit, members=False)
            except zlib.error:
                return _inflate(data, -zlib.MAX_WBITS, limit, members=False)
        if coding == "zstd":
            return _unzstd(data, limit)
    except (zlib.error, ZstdError):
        raise parse_error() from None
    raise unsupported_encoding(coding)


def decompress(raw: bytes, content_encoding: str | None, limit: int) -> bytes:
    """Undo every coding named in Content-Encoding (last applied first); 413 past `limit`."""
    codings = [c.strip().lower() for c in (content_encoding or "").split(",")]
    data = raw
    for coding in reversed([c for c in codings if c and c != "identity"]):
        if not data:
            break  # an empty body stays empty, whatever it claims to be encoded with
        data = _decode_one(data, coding, limit)
    if len(data) > limit:
        raise too_large(limit)
    return data


def parse_json(data: bytes) -> Any:
    """JSON from UTF-8 bytes (a BOM is allowed); duplicate keys: the last wins, as in Python."""
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise parse_error() from None
    non_finite: list[float] = []  # in document order: the parser calls the hooks as it reads

    def number(literal: str) -> float:
        value = float(literal)
        if not math.isfinite(value):
            non_finite.append(value)
        return value

    try:
        value = json.loads(text, parse_float=number, parse_constant=number)
    except json.JSONDecodeError as exc:
        raise json_invalid(exc.pos, exc.msg) from None
    except (ValueError, RecursionError):  # an int over 4300 digits; nesting past the parser's stack
        raise parse_error() from None
    if non_finite:
        raise non_finite_error(non_finite[0])
    return value


def read_body(raw: bytes, *, content_type: str | None, content_encoding: str | None, limit: int) -> Any:
    """The value to validate: None for an empty body, parsed JSON for a JSON content type, else
    the body as a string (FastAPI validates the raw body then; it fails as not an object)."""
    data = decompress(raw, content_encoding, limit)
    if not data:
        return None
    if is_json_content_type(content_type):
        return parse_json(data)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise not_encodable(exc) from None
