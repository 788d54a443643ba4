"""Fitting a profile's learned yes/no head (worker/head.py) on the fit half: an L2-regularised
logistic regression on a fixed set of logit columns at the answer position.

The columns: the profile's yes/no tokens plus FEATURES ids spread evenly over the vocabulary,
more than any of our models' hidden sizes (576 / 640), so the head can reach any linear
function of the hidden state (see worker/head.py). Features are standardised on the fit half and
the scaling folded into the weights. The penalty is chosen by 5-fold cross-validation on the fit
half (log loss); the head's own calibration (Platt) is then fitted on the out-of-fold logits, so
neither step sees the items it is scored on, and the test half is never touched.

Newton's method runs in the span of the centred fit features (their SVD): an L2 optimum lies in
that span, so the problem has at most n_fit dimensions however many columns are read.
"""
from __future__ import annotations

import numpy as np

from worker.head import Head, make_head

FEATURES = 1024
PENALTIES = (0.001, 0.01, 0.1, 1.0, 10.0, 100.0)  # L2 strength per fit item, on standardised features
FOLDS = 5


def feature_ids(n_vocab: int, answer_ids: list[int], count: int = FEATURES) -> np.ndarray:
    """The answer tokens, then evenly spaced ids up to `count` distinct columns, sorted."""
    spread = np.linspace(0, n_vocab - 1, count).astype(np.int64)
    ids = np.unique(np.concatenate([np.asarray(answer_ids, dtype=np.int64), spread]))
    return ids[:count]


def fit_logistic(x: np.ndarray, y: np.ndarray, penalty: float, *, steps: int = 50) -> tuple[np.ndarray, float]:
    """(w, b) minimising Σ log-loss(x·w + b, y) + penalty·n/2·|w|² (b is not penalised)."""
    n = len(y)
    mean = x.mean(axis=0)
    u, s, vt = np.linalg.svd(x - mean, full_matrices=False)
    keep = s > s[0] * 1e-9
    z = np.column_stack([u[:, keep] * s[keep], np.ones(n)])  # scores in the span, plus the intercept
    reg = np.full(z.shape[1], penalty * n)
    reg[-1] = 0.0
    theta = np.zeros(z.shape[1])
    for _ in range(steps):
        p = 1.0 / (1.0 + np.exp(-(z @ theta)))
        grad = z.T @ (p - y) + reg * theta
        hess = (z.T * (p * (1 - p))) @ z + np.diag(reg) + 1e-9 * np.eye(len(theta))
        step = np.linalg.solve(hess, grad)
        theta -= step  # the loss is strictly convex and the penalty keeps Newton's steps modest
        if np.max(np.abs(step)) < 1e-9:
            break
    w = vt[keep].T @ theta[:-1]
    return w, float(theta[-1] - mean @ w)


def _folds(n: int) -> list[np.ndarray]:
    return [np.arange(n)[k::FOLDS] for k in range(FOLDS)]


def _log_loss(z: np.ndarray, y: np.ndarray) -> float:
    return float(np.mean(np.logaddexp(0.0, z) - y * z))


def out_of_fold(x: np.ndarray, y: np.ndarray, penalty: float) -> np.ndarray:
    """Each fit item's logit from a head fitted on the other folds."""
    z = np.empty(len(y))
    for held in _folds(len(y)):
        train = np.setdiff1d(np.arange(len(y)), held)
        w, b = fit_logistic(x[train], y[train], penalty)
        z[held] = x[held] @ w + b
    return z


def fit_head(features: np.ndarray, labels: np.ndarray, ids: np.ndarray) -> tuple[Head, float, np.ndarray]:
    """(head, chosen penalty, out-of-fold logits of the fit items)."""
    y = np.asarray(labels, dtype=float)
    mean, std = features.mean(axis=0), features.std(axis=0)
    std[std == 0] = 1.0
    x = (features - mean) / std
    scored = [(_log_loss(oof := out_of_fold(x, y, lam), y), lam, oof) for lam in PENALTIES]
    _, penalty, oof = min(scored, key=lambda t: t[0])
    w, b = fit_logistic(x, y, penalty)
    weights = w / std
    bias = b - float(mean @ weights)
    return make_head(ids, weights, bias), penalty, oof
