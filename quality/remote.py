"""Asking the labeled set through a running server (POST /v1/systemone), as any client would.

A few requests are kept in flight so a fleet's workers batch them; 429/503 answers are retried
after their Retry-After. A 4xx answer (e.g. a question type that server does not answer) marks
the item skipped with the server's message rather than failing the whole run.
"""
from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable

from quality.items import QUESTION_ID, Item, Skipped, outcome
from quality.metrics import Outcome

RETRIES = 20


def endpoint(url: str) -> str:
    url = url.rstrip("/")
    return url if url.endswith("/v1/systemone") else url + "/v1/systemone"


class RemoteRunner:
    def __init__(self, url: str, *, concurrency: int = 4, timeout: float = 120.0, api_key: str | None = None):
        self.url = endpoint(url)
        self.concurrency = concurrency
        self.timeout = timeout
        self.api_key = api_key if api_key is not None else os.environ.get("JEV_API_KEY", "")

    def _post(self, body: dict[str, Any]) -> tuple[int, dict[str, Any], float]:
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        req = urllib.request.Request(self.url, data=json.dumps(body).encode(), headers=headers, method="POST")
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                return resp.status, json.loads(resp.read()), 0.0
        except urllib.error.HTTPError as exc:
            try:
                detail = json.loads(exc.read())
            except ValueError:
                detail = {"detail": exc.reason}
            return exc.code, detail, float(exc.headers.get("Retry-After") or 1)

    def _ask_one(self, item: Item) -> Outcome | Skipped:
        for _ in range(RETRIES):
            status, body, retry_after = self._post(item.request())
            if status == 200:
                return outcome(item, body["answers"][QUESTION_ID])
            if status not in (429, 503):
                return Skipped(item.id, f"HTTP {status}: {json.dumps(body.get('detail'))[:300]}")
            time.sleep(retry_after)
        return Skipped(item.id, f"still overloaded after {RETRIES} tries")

    def ask(self, items: list[Item], progress: Callable[[int], None] = lambda n: None) -> list[Outcome | Skipped]:
        def one(item: Item) -> Outcome | Skipped:
            result = self._ask_one(item)
            progress(1)
            return result

        with ThreadPoolExecutor(max_workers=self.concurrency) as pool:
            return list(pool.map(one, items))

    def close(self) -> None:
        pass
