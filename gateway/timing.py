"""Server-Timing: how long each phase of a request took, in the order the spec lists them."""
from __future__ import annotations

import time
from contextlib import contextmanager
from typing import Iterator

PHASES = ("parse", "validate", "tokenize", "queue", "inference", "respond")


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

    def set(self, phase: str, ms: float) -> None:
        self.ms[phase] = ms

    def header(self) -> str:
        total = (time.perf_counter() - self.start) * 1000
        parts = [f"{p};dur={self.ms[p]:.2f}" for p in PHASES if p in self.ms]
        return ", ".join(parts + [f"total;dur={total:.2f}"])
