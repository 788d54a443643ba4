"""Reading a yes/no answer out of the logits row at a suffix's last token: the yes−no logit
margin, or a profile's learned head.

The head is a logistic regression on a fixed set of columns of that same row (conf/models/
<profile>.head.npz, fitted by `jevfleet calibrate --head`). Why logits and not the hidden state:
llama.cpp hands out hidden states only from a context with embeddings on, and such a context
makes every token of a batch an output (llama-context.cpp, `output_all = cparams.embeddings`),
so the full-vocabulary output row would be computed for every prompt token. The row we already
read is W·h (W the output matrix, h the final hidden state), so a linear head on more columns
than h has dimensions (their rows of W of full rank) spans the same functions as a linear head
on h, and costs one gather and one sum per answer.

Invariant: the margin is a function of the logits row alone, computed in a fixed order (an
exactly rounded sum), so deterministic mode stays bit-identical with the head on.
"""
from __future__ import annotations

import hashlib
import io
import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from worker.engine import Job


def logsumexp(values: list[float]) -> float:
    top = max(values)
    return top + math.log(sum(math.exp(v - top) for v in values))


@dataclass(frozen=True)
class Head:
    """logit = bias + Σ weights · logits[ids] (feature scaling is folded into the weights)."""

    ids: np.ndarray  # int64 token ids: the columns read
    weights: np.ndarray  # float64, one per id
    bias: float
    digest: str  # SHA-256 of the file: part of what identifies what a worker serves

    def logit(self, row: np.ndarray) -> float:
        """The head's logit from a whole logits row."""
        return self.logit_of(row[self.ids])

    def logit_of(self, columns: np.ndarray) -> float:
        """The head's logit from its columns alone (as Readout.capture copies them)."""
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
    """What the engine does with each logits row it reads (only the model thread calls it).

    capture: token ids whose logits are also copied into job.features[suffix] (to fit a head)."""

    def __init__(self, n_vocab: int, head: Head | None = None) -> None:
        self.n_vocab = n_vocab
        self.head = head
        self.capture: np.ndarray | None = None
        if head is not None and (head.ids.min() < 0 or head.ids.max() >= n_vocab):
            raise ValueError("the head reads token ids outside this model's vocabulary")

    def margin(self, job: Job, suffix: int, logits) -> float:
        if self.capture is not None:
            job.features[suffix] = np.ctypeslib.as_array(logits, shape=(self.n_vocab,))[self.capture].copy()
        if self.head is not None:
            return self.head.logit(np.ctypeslib.as_array(logits, shape=(self.n_vocab,)))
        # the plain margin reads two or four columns straight from llama.cpp's row
        return logsumexp([logits[t] for t in job.yes_ids]) - logsumexp([logits[t] for t in job.no_ids])
