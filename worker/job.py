"""One request as the engine sees it (worker/engine.py), the readout (worker/head.py) fills it
and the scheduler (worker/scheduler.py) queues it. A module of its own so that the engine and
the readout both use it without importing each other."""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

from shared.messages import suffix_tokens

if TYPE_CHECKING:
    import numpy as np


@dataclass
class Job:
    """One request as the engine sees it: a shared prefix and the suffixes that continue it."""

    prefix: list[int]
    suffixes: list[list[int]]
    yes_ids: list[int]
    no_ids: list[int]
    margins: list[float] = field(default_factory=list)
    reused: int = 0  # prefix tokens taken from a snapshot or a batch mate instead of read
    features: dict[int, Any] = field(default_factory=dict)  # suffix -> captured logits (Readout.capture)
    # suffix -> llama.cpp's own logits at the captured ids and the logsumexp of its whole row, when
    # the tap lets llama.cpp finish the output matmul (HiddenTap.full_logits: bench-readout, tests)
    reference: dict[int, tuple[np.ndarray, float]] = field(default_factory=dict)

    @cached_property
    def suffix_reads(self) -> int:
        """Tokens its suffixes read, common leading tokens once (kept: the scheduler asks often)."""
        return suffix_tokens(self.suffixes)
