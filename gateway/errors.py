"""Error bodies, each in the shape wire-spec.md gives it (FastAPI's, for clients that parse it)."""
from __future__ import annotations

import json
from typing import Any, Iterable

from aiohttp import web


def _json(status: int, body: Any, headers: dict[str, str] | None = None) -> web.Response:
    return web.json_response(text=json.dumps(body, ensure_ascii=False, default=str), status=status,
                             headers=headers)


def json_error(status: int, detail: Any, headers: dict[str, str] | None = None) -> web.Response:
    return _json(status, {"detail": detail}, headers)


def bad_request() -> web.Response:
    return json_error(400, "There was an error parsing the body")


def validation_error(errors: Iterable[dict[str, Any]], prefix: tuple = ()) -> web.Response:
    """422 with pydantic's errors, locs prefixed the way FastAPI does (["body", ...])."""
    detail = []
    for err in errors:
        item = {"type": err["type"], "loc": [*prefix, *err["loc"]], "msg": err["msg"], "input": err.get("input")}
        if "ctx" in err:
            item["ctx"] = {k: (v if isinstance(v, (str, int, float, bool, type(None))) else str(v))
                           for k, v in err["ctx"].items()}
        detail.append(item)
    return json_error(422, detail)


def value_error(loc: list, msg: str) -> web.Response:
    """The short form used for checks the schema cannot express."""
    return json_error(422, [{"loc": loc, "msg": msg, "type": "value_error"}])


def overloaded(status: int, message: str, *, retry_after: int) -> web.Response:
    """429/503; Retry-After is never 0 (clients would retry in a tight loop)."""
    return json_error(status, {"error_type": "overloaded", "message": message},
                      headers={"Retry-After": str(max(1, retry_after))})
