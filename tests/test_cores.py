"""Core sets of workers: explicit, or derived from the process number."""
from __future__ import annotations

import pytest

from worker.cores import derive_cores, parse_cores


def test_explicit_core_sets_are_parsed():
    assert parse_cores("2-3", available=list(range(4))) == [2, 3]
    assert parse_cores("0,2, 3", available=list(range(4))) == [0, 2, 3]


def test_cores_the_process_may_not_use_are_refused_clearly():
    with pytest.raises(ValueError, match=r"cores \[5\] are not available"):
        parse_cores("4-5", available=[0, 1, 2, 3, 4])
    with pytest.raises(ValueError, match="not a core number"):
        parse_cores("two", available=[0, 1])


def test_worker_k_takes_the_kth_core_set_and_wraps_around():
    cores = list(range(8))
    assert [derive_cores(k, 2, cores) for k in range(5)] == [[0, 1], [2, 3], [4, 5], [6, 7], [0, 1]]
    assert derive_cores(1, 1, [0, 1]) == [1]
    assert derive_cores(0, 4, [0, 1]) == [0, 1]  # never more than the machine has
