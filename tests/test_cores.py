"""Core sets of workers: explicit, or derived from the process number within the CPUs the process
may run on, or not pinned at all (pin_workers = 0)."""
from __future__ import annotations

import os

import pytest

from worker.cores import CoreSet, allowed_cores, choose_cores, derive_cores, parse_cores


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


def test_pinning_stays_within_the_allowed_cpus_of_a_container_or_taskset():
    cpuset = [4, 5, 6, 7]  # what a static-policy kubelet gives a pod: not the node's first cores
    assert [derive_cores(k, 2, cpuset) for k in range(3)] == [[4, 5], [6, 7], [4, 5]]
    assert choose_cores(1, per_worker=2, pin_workers=True, available=cpuset) == CoreSet([6, 7], pinned=True, threads=2)
    assert choose_cores(0, per_worker=2, pin_workers=True, available=[3]) == CoreSet([3], pinned=True, threads=1)


def test_without_pinning_a_worker_runs_on_every_allowed_cpu_with_its_share_of_threads():
    node = list(range(64))  # the default CPU manager policy: every pod sees the whole node
    assert choose_cores(3, per_worker=2, pin_workers=False, available=node) == CoreSet(node, pinned=False, threads=2)
    assert choose_cores(0, per_worker=2, pin_workers=False, threads=3, available=node).threads == 3
    assert choose_cores(0, per_worker=4, pin_workers=False, available=[0, 1]).threads == 2


def test_an_explicit_core_set_is_pinned_to_even_with_pinning_off():
    assert choose_cores(0, per_worker=2, pin_workers=False, explicit="1", available=[0, 1]) == \
        CoreSet([1], pinned=True, threads=1)
    with pytest.raises(ValueError, match="are not available"):
        choose_cores(0, per_worker=2, pin_workers=True, explicit="9", available=[0, 1])


def test_the_default_is_this_processs_own_affinity_mask():
    assert allowed_cores() == sorted(os.sched_getaffinity(0))
    assert set(choose_cores(0, per_worker=1, pin_workers=True).cores) <= set(allowed_cores())
