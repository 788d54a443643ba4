"""Asking the labeled set through a running server (POST /v1/systemone), as any client would.

A few requests are kept in flight so a fleet's workers batch them; 429/503 answers are retried
after their Retry-After. A 4xx answer (e.g. a question type that server does not answer) marks
the item skipped with the server's message rather than failing the whole run.
"""
from __future__ import annotations

import json
import os
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable

from client.net import http, retry_wait
from quality.items import QUESTION_ID, Item, Skipped, outcome, refused
from quality.metrics import Outcome

RETRIES = 20
MAX_WAIT_S = 30.0  # the longest a Retry-After is waited (a server asking for an hour must not stall a run)


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
        """(status, JSON body, seconds the server asks us to wait before trying again)."""
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        status, got, raw = http("POST", self.url, json.dumps(body).encode(), headers, self.timeout)
        try:
            answer = json.loads(raw)
        except ValueError:  # not our JSON: e.g. a load balancer's own error page
            answer = {"detail": raw[:200].decode("utf-8", "replace")}
        return status, answer, 0.0 if status == 200 else retry_wait(got, most=MAX_WAIT_S)

    def _ask_one(self, item: Item) -> Outcome | Skipped:
        for _ in range(RETRIES):
            status, body, retry_after = self._post(item.request())
            if status == 200:
                return outcome(item, body["answers"][QUESTION_ID])
            if status not in (429, 503):
                return refused(item, status, body)
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
