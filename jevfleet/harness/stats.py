"""The one percentile of the tests, benchmarks and load sweeps.

Which one: numpy's "inverted_cdf", the smallest observed value that at least `fraction` of the
observations do not exceed (the nearest-rank percentile). A p99 is then a latency some request
really had, never one interpolated between two, and it is the definition Locust applies to its
response-time histogram, so a percentile of raw samples and one of a Locust histogram (values
with counts) mean the same thing in every table.
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np


def percentile(values: Sequence[float], fraction: float, counts: Sequence[int] | None = None) -> float:
    """The `fraction` (0..1) percentile of `values`, each seen counts[i] times (once if no
    counts); NaN when there are none."""
    if len(values) == 0:
        return math.nan
    return float(np.quantile(np.asarray(values, dtype=float), fraction, method="inverted_cdf",
                             weights=None if counts is None else np.asarray(counts, dtype=float)))
