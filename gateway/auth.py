"""API-key authentication: with JEV_API_KEY set, every call but /health and /metrics must send
`Authorization: Bearer <key>`. Without it, an Authorization header is ignored (the official
SDK always sends one)."""
from __future__ import annotations

import hmac

OPEN_PATHS = frozenset({"/health", "/metrics"})


def authorized(header: str | None, api_key: str) -> bool:
    """Constant-time comparison of the bearer token with the key (the scheme is case-insensitive)."""
    scheme, _, token = (header or "").strip().partition(" ")
    if scheme.lower() != "bearer":
        return False
    # aiohttp decodes header bytes as UTF-8 with surrogateescape; this gives back the bytes sent
    given = token.strip().encode("utf-8", "surrogateescape")
    return hmac.compare_digest(given, api_key.encode("utf-8"))
