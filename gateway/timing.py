"""Server-Timing: how long each phase of a request took, in the order the request went through them.

`queue` and `inference` are the worker's own measurements; `outside` is the rest of the gateway's
wait for the answer: transit both ways, time parked while no worker was up, and time held by a
worker that was lost before the request was sent again.
"""
from __future__ import annotations

import time
from contextlib import contextmanager
from typing import Iterator

PHASES = ("parse", "validate", "tokenize", "queue", "inference", "outside", "respond")


class Timing:
    def __init__(self) -> None:
        self.start = self._mark = time.perf_counter()
        self.ms: dict[str, float] = {}

    def lap(self, phase: str) -> None:
        """Close `phase` at now."""
        now = time.perf_counter()
        self.ms[phase] = self.ms.get(phase, 0.0) + (now - self._mark) * 1000
        self._mark = now

    @contextmanager
    def phase(self, phase: str) -> Iterator[None]:
        """Close `phase` when the block ends, also when it raises: an error answer shows how far
        the request got and how long that took."""
        try:
            yield
        finally:
            self.lap(phase)

    def answered(self, queue_ms: float, run_ms: float) -> None:
        """Close the wait for a worker's answer at now, split into the worker's `queue` and
        `inference` and the `outside` rest (floored at 0: the two processes read their clocks
        at other moments, so a fast answer could come out a hair below)."""
        now = time.perf_counter()
        waited = (now - self._mark) * 1000
        self.ms.update(queue=queue_ms, inference=run_ms, outside=max(0.0, waited - queue_ms - run_ms))
        self._mark = now

    def header(self) -> str:
        total = (time.perf_counter() - self.start) * 1000
        parts = [f"{p};dur={self.ms[p]:.2f}" for p in PHASES if p in self.ms]
        return ", ".join(parts + [f"total;dur={total:.2f}"])
