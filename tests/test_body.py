"""Reading a request body: content types, compression with a bounded size, UTF-8, JSON errors."""
from __future__ import annotations

import gzip
import json
import sys
import tracemalloc
import zlib

import pytest

from gateway.body import decompress, is_json_content_type, read_body
from gateway.errors import PARSE_ERROR, ApiError

if sys.version_info >= (3, 14):
    from compression import zstd
else:
    from backports import zstd

LIMIT = 4 * 1024 * 1024
BODY = json.dumps({"model": "jev-latest", "state": "ünïcode 🚀", "questions": {"q": {"type": "noul"}}}).encode()


def read(raw: bytes, content_type: str | None = "application/json", encoding: str | None = None, limit: int = LIMIT):
    return read_body(raw, content_type=content_type, content_encoding=encoding, limit=limit)


def refused(raw: bytes, content_type: str | None = "application/json", encoding: str | None = None,
            limit: int = LIMIT) -> tuple[int, object]:
    with pytest.raises(ApiError) as caught:
        read(raw, content_type, encoding, limit)
    return caught.value.status, json.loads(caught.value.json())


def raw_deflate(data: bytes) -> bytes:
    c = zlib.compressobj(wbits=-zlib.MAX_WBITS)
    return c.compress(data) + c.flush()


@pytest.mark.parametrize("content_type", ["application/json", "application/json; charset=utf-8", "APPLICATION/JSON",
                                          "application/vnd.api+json", "Application/Problem+JSON; charset=UTF-8"])
def test_json_and_plus_json_content_types_in_any_case_are_parsed(content_type):
    assert is_json_content_type(content_type)
    assert read(BODY, content_type) == json.loads(BODY)


@pytest.mark.parametrize("content_type", [None, "", "text/plain", "application/x-www-form-urlencoded", "json",
                                          "text/json", "application/jsonx", "multipart/form-data; boundary=x"])
def test_other_or_missing_content_types_leave_the_body_a_string(content_type):
    assert not is_json_content_type(content_type)
    assert read(BODY, content_type) == BODY.decode()


@pytest.mark.parametrize("raw", [b"\xff{}", b"ok \xc3", b"\xed\xa0\x80"])
def test_non_json_body_that_is_not_utf8_is_a_422_with_pythons_own_decoding_error(raw):
    with pytest.raises(UnicodeDecodeError) as python:
        raw.decode("utf-8")
    assert refused(raw, "text/plain") == (422, {"detail": [{"loc": ["body"], "msg": str(python.value),
                                                            "type": "value_error"}]})


@pytest.mark.parametrize("content_type", ["application/json", "text/plain", None])
def test_empty_body_is_no_body(content_type):
    assert read(b"", content_type) is None


def test_utf8_bom_is_accepted():
    assert read(b"\xef\xbb\xbf" + BODY) == json.loads(BODY)


@pytest.mark.parametrize("raw", [b'{"state": "\xff"}', b"\xfe\xff\x00{", b'{"state": "\xed\xa0\x80"}', b"\xc3"])
def test_bytes_that_are_not_utf8_are_a_400(raw):
    assert refused(raw) == (400, {"detail": PARSE_ERROR})


def test_integer_of_more_than_4300_digits_is_a_400():
    assert read(b'{"n": ' + b"7" * 4300 + b"}") == {"n": int("7" * 4300)}
    assert refused(b'{"n": ' + b"7" * 4301 + b"}") == (400, {"detail": PARSE_ERROR})


def test_body_not_json_is_422_json_invalid_with_the_character_position():
    status, body = refused(b'{"a": 1,}')
    assert status == 422
    assert json.dumps(body, separators=(",", ":")) == (
        '{"detail":[{"type":"json_invalid","loc":["body",8],"msg":"JSON decode error","input":{},'
        '"ctx":{"error":"Expecting property name enclosed in double quotes"}}]}')
    # the position counts characters, not bytes: "ü" is two bytes and one character
    assert refused('{"ü": 1,}'.encode())[1]["detail"][0]["loc"] == ["body", 8]


def test_position_counts_from_after_the_bom():
    assert refused(b'\xef\xbb\xbf{"a": 1,}')[1]["detail"][0]["loc"] == ["body", 8]


def test_trailing_text_is_json_invalid_extra_data():
    status, body = refused(b'{"a": 1} x')
    assert status == 422 and body["detail"][0]["ctx"] == {"error": "Extra data"} and body["detail"][0]["loc"] == ["body", 9]


def test_whitespace_only_json_body_is_json_invalid():
    assert refused(b"  ")[1]["detail"][0]["ctx"] == {"error": "Expecting value"}


def test_duplicate_keys_the_last_value_wins_in_the_first_position():
    value = read(b'{"questions": {"a": 1, "b": 2, "a": 3}}')
    assert list(value["questions"].items()) == [("a", 3), ("b", 2)]


def test_a_lone_surrogate_escape_parses_and_a_pair_is_a_character():
    assert read(b'{"state": "\\ud800"}') == {"state": "\ud800"}  # checks.py refuses it where it is tokenized
    assert read(b'{"\\udfff": 1}') == {"\udfff": 1}
    assert read(b'{"state": "\\ud83d\\ude80"}') == {"state": "🚀"}


@pytest.mark.parametrize("raw, shown", [
    (b'{"state": {"x": [1, NaN]}}', "nan"), (b'{"state": Infinity}', "inf"), (b'{"model": -Infinity}', "-inf"),
    (b'{"questions": {"q": {"instructions": 1e400}}}', "inf"), (b'[-1e999, NaN]', "-inf"),
    (b'{"unknown": [NaN], "state": Infinity}', "nan"),  # the first in the document, wherever it is
])
def test_nan_or_infinity_anywhere_in_the_body_is_a_422_naming_the_first(raw, shown):
    # the reference's validator wrapping json.dumps(allow_nan=False)'s words, for inf and -inf alike
    msg = f"Value error, Out of range float values are not JSON compliant: {shown}"
    assert refused(raw) == (422, {"detail": [{"loc": ["body"], "msg": msg, "type": "value_error"}]})


def test_nesting_past_the_parsers_stack_is_a_400():
    assert refused(b"[" * 100_000 + b"]" * 100_000) == (400, {"detail": PARSE_ERROR})


def test_deep_nesting_within_the_parsers_stack_is_parsed():
    assert read(b"[" * 500 + b"]" * 500) is not None


@pytest.mark.parametrize("encoding, compress", [
    ("gzip", gzip.compress),
    ("x-gzip", gzip.compress),
    ("GZIP", gzip.compress),
    ("deflate", zlib.compress),
    ("deflate", raw_deflate),
    ("zstd", zstd.compress),
    ("identity", lambda b: b),
])
def test_gzip_deflate_and_zstd_bodies_are_decompressed(encoding, compress):
    assert read(compress(BODY), encoding=encoding) == json.loads(BODY)


def test_several_gzip_members_and_zstd_frames_are_one_body():
    half = len(BODY) // 2
    assert read(gzip.compress(BODY[:half]) + gzip.compress(BODY[half:]), encoding="gzip") == json.loads(BODY)
    assert read(zstd.compress(BODY[:half]) + zstd.compress(BODY[half:]), encoding="zstd") == json.loads(BODY)


def test_stacked_encodings_are_undone_last_first():
    assert read(zstd.compress(gzip.compress(BODY)), encoding="gzip, zstd") == json.loads(BODY)


@pytest.mark.parametrize("encoding, data", [
    ("gzip", gzip.compress(BODY)[:-9]),  # truncated
    ("gzip", gzip.compress(BODY) + b"junk"),
    ("gzip", b"not gzip at all"),
    ("deflate", zlib.compress(BODY)[:-3]),
    ("deflate", b"\xff\xff\xff\xff"),
    ("zstd", zstd.compress(BODY)[:-5]),
    ("zstd", zstd.compress(BODY) + b"junk"),
    ("zstd", b"not zstd at all"),
])
def test_corrupt_or_truncated_compressed_bodies_are_a_400(encoding, data):
    assert refused(data, encoding=encoding) == (400, {"detail": PARSE_ERROR})


def test_unknown_content_encoding_is_a_400_naming_it():
    status, body = refused(b"...", encoding="br")
    assert status == 400 and "'br'" in body["detail"]


def test_empty_body_with_a_content_encoding_is_no_body():
    assert read(b"", encoding="gzip") is None


def test_body_over_the_limit_is_413_compressed_or_not():
    big = b" " * (LIMIT + 1)
    assert refused(big)[0] == 413
    assert refused(gzip.compress(big), encoding="gzip")[0] == 413
    assert read(b" " * (LIMIT - 2) + b"{}") == {}


def _bombs() -> dict[str, bytes]:
    """64 MiB of zeros (16 times the limit), compressed to about 64 KiB each."""
    chunk, n = bytes(1 << 20), 64
    gz = zlib.compressobj(wbits=16 + zlib.MAX_WBITS)
    zs = zstd.ZstdCompressor()
    out = {"gzip": b"", "zstd": b""}
    for _ in range(n):
        out["gzip"] += gz.compress(chunk)
        out["zstd"] += zs.compress(chunk)
    out["gzip"] += gz.flush()
    out["zstd"] += zs.flush()
    out["deflate"] = zlib.compress(bytes(n << 20), 9)
    return out


@pytest.fixture(scope="module")
def bombs() -> dict[str, bytes]:
    return _bombs()


@pytest.mark.parametrize("encoding", ["gzip", "deflate", "zstd"])
def test_zip_bomb_gets_413_without_inflating_it(bombs, encoding):
    tracemalloc.start()
    try:
        with pytest.raises(ApiError) as caught:
            decompress(bombs[encoding], encoding, LIMIT)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert caught.value.status == 413
    assert peak < 3 * LIMIT, f"peak {peak} bytes while decompressing"
