"""Reading a yes/no answer out of the final hidden state h at a suffix's last token: the yes−no
logit margin, or a profile's learned head.

The head is a logistic regression on a fixed set of logits columns (conf/models/<profile>.head.npz,
fitted by `jevfleet calibrate --head`). A column is W[id]·h, W the output matrix, whose rows
worker/hidden.py reads from the GGUF file: llama.cpp never computes the full logits row
(worker/hidden.py says why). The head's columns come from one product of fixed shape, the same
one that captures them for `calibrate`, so eval with the head on reproduces calibrate's margins.

Invariant: the margin is a function of h alone, rounded as llama.cpp's output matmul would round
it (worker/hidden.py), by sums in an order fixed by the shapes alone (the yes/no margin's exactly
rounded), so deterministic mode stays bit-identical with the head on.
"""
from __future__ import annotations

import hashlib
import io
import math
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from worker.hidden import q8_0_round_trip

if TYPE_CHECKING:
    from worker.job import Job
    from worker.hidden import OutputMatrix


def logsumexp(values: list[float]) -> float:
    top = max(values)
    return top + math.log(sum(math.exp(v - top) for v in values))


def yes_no_margin(logit: Callable[[Hashable], float], yes: Iterable[Hashable], no: Iterable[Hashable]) -> float:
    """The margin every reading of an answer takes, served or not: logsumexp of the yes tokens'
    logits − logsumexp of the no tokens' (`logit` gives a token's logit, by id or by form)."""
    return logsumexp([logit(t) for t in yes]) - logsumexp([logit(t) for t in no])


@dataclass(frozen=True)
class Head:
    """logit = bias + Σ weights · logits[ids] (feature scaling is folded into the weights)."""

    ids: np.ndarray  # int64 token ids: the columns read
    weights: np.ndarray  # float64, one per id
    bias: float
    digest: str  # SHA-256 of the file: part of what identifies what a worker serves

    def logit_of(self, columns: np.ndarray) -> float:
        """The head's logit from its columns (as Readout.capture computes them)."""
        return self.bias + math.fsum(columns.astype(np.float64) * self.weights)

    def save(self, path: Path) -> None:
        path.write_bytes(_encode(self.ids, self.weights, self.bias))


def _encode(ids: np.ndarray, weights: np.ndarray, bias: float) -> bytes:
    buf = io.BytesIO()
    np.savez(buf, ids=ids.astype(np.int64), weights=weights.astype(np.float64), bias=np.array(float(bias)))
    return buf.getvalue()


def make_head(ids: np.ndarray, weights: np.ndarray, bias: float) -> Head:
    """A head whose digest is that of the file save() writes."""
    digest = hashlib.sha256(_encode(ids, weights, bias)).hexdigest()
    return Head(ids=ids.astype(np.int64), weights=weights.astype(np.float64), bias=float(bias), digest=digest)


def load_head(path: Path) -> Head:
    data = path.read_bytes()
    with np.load(io.BytesIO(data)) as npz:
        ids, weights, bias = npz["ids"].astype(np.int64), npz["weights"].astype(np.float64), float(npz["bias"])
    if ids.ndim != 1 or ids.shape != weights.shape or not np.isfinite(weights).all():
        raise ValueError(f"{path}: not a head (ids and weights must be finite vectors of one length)")
    return Head(ids=ids, weights=weights, bias=bias, digest=hashlib.sha256(data).hexdigest())


class Readout:
    """What the engine does with each output row's hidden state (only the model thread calls it).

    capture: token ids whose logits are also computed into job.features[suffix] (to fit a head)."""

    def __init__(self, matrix: OutputMatrix, head: Head | None = None) -> None:
        self.matrix = matrix
        self.head = head
        self._capture: tuple[np.ndarray, np.ndarray] | None = None  # ids, their rows of W
        self.as_llama = False  # captured columns from h rounded as llama.cpp rounds it (the canary's check)
        if head is not None and (head.ids.min() < 0 or head.ids.max() >= matrix.n_vocab):
            raise ValueError("the head reads token ids outside this model's vocabulary")
        self._head_rows = None if head is None else matrix.rows(head.ids)

    @property
    def capture(self) -> np.ndarray | None:
        return None if self._capture is None else self._capture[0]

    @capture.setter
    def capture(self, ids: np.ndarray | None) -> None:
        self._capture = None if ids is None else (ids, self.matrix.rows(ids))

    def margin(self, job: Job, suffix: int, hidden: np.ndarray, full: np.ndarray | None = None) -> float:
        """The answer's margin from h; with a capture set, also the captured columns into
        job.features and, given llama.cpp's own logits row `full`, the same columns of it and the
        row's logsumexp into job.reference (what bench-readout compares)."""
        h = q8_0_round_trip(hidden)
        if self._capture is not None:
            rounded = self.matrix.as_llama_rounds(hidden) if self.as_llama else h
            job.features[suffix] = self.matrix.finish(self._capture[1] @ rounded)
            if full is not None:
                top = float(full.max())
                lse = top + math.log(float(np.exp(full.astype(np.float64) - top).sum()))
                job.reference[suffix] = (full[self._capture[0]].astype(np.float64), lse)
        if self.head is not None:
            return self.head.logit_of(self.matrix.finish(self._head_rows @ h))
        return yes_no_margin(lambda t: self.logit(t, h), job.yes_ids, job.no_ids)

    def logit(self, token: int, h: np.ndarray) -> float:
        return float(self.matrix.finish(math.fsum(self.matrix.row(token) * h)))
