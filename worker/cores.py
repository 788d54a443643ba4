"""Which cores a worker runs on: given explicitly ("2-3", "0,2"), or derived from its process
number so that worker k of a fleet takes cores [k*n, (k+1)*n) of the CPUs this process may run on
(its affinity mask: a container's or a taskset's CPU set, not the machine's); or, with pinning off
(pin_workers = 0), all of those CPUs, as the kernel schedules it.

Invariant: a worker is only ever pinned within the CPUs its process was allowed to run on. Pinning
off is for where the allowed CPUs are not the worker's own: a Kubernetes node under the default CPU
manager policy gives every pod the whole node, so each unit's worker would pin to the same first
cores while the CPU quota, not the cores, bounds it (docs/deploy.md).
"""
from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class CoreSet:
    cores: list[int]  # pinned to these, or, not pinned, the CPUs it may run on
    pinned: bool
    threads: int  # llama.cpp threads: the `threads` setting, else one per core of its share


def allowed_cores() -> list[int]:
    """The CPUs this process may run on."""
    return sorted(os.sched_getaffinity(0))


def parse_cores(spec: str, available: list[int] | None = None) -> list[int]:
    """"2-3" or "0,2" → [2, 3] / [0, 2]; refuses cores this process may not run on."""
    cores: list[int] = []
    for part in spec.split(","):
        part = part.strip()
        if not part:
            continue
        lo, _, hi = part.partition("-")
        try:
            cores.extend(range(int(lo), int(hi or lo) + 1))
        except ValueError:
            raise ValueError(f"--cores {spec!r}: {part!r} is not a core number or range like 2-3") from None
    if not cores:
        raise ValueError(f"no cores in {spec!r}")
    avail = set(available if available is not None else allowed_cores())
    if not set(cores) <= avail:
        raise ValueError(f"--cores {spec!r}: cores {sorted(set(cores) - avail)} are not available "
                         f"(this process may use {sorted(avail)})")
    return sorted(set(cores))


def derive_cores(index: int, per_worker: int, available: list[int] | None = None) -> list[int]:
    """Worker `index`'s share; wraps around when there are more workers than core sets."""
    avail = sorted(available if available is not None else allowed_cores())
    per = max(1, min(per_worker, len(avail)))
    sets = max(1, len(avail) // per)
    start = (index % sets) * per
    return avail[start : start + per]


def choose_cores(index: int, *, per_worker: int, pin_workers: bool, threads: int = 0, explicit: str = "",
                 available: list[int] | None = None) -> CoreSet:
    """Worker `index`'s cores: an explicit set is always pinned to; else its share of the allowed
    CPUs with pinning on, or all of them, unpinned, with it off. Unpinned, it still runs
    per_worker threads (at most one per allowed CPU), not one per CPU of the node."""
    avail = sorted(available if available is not None else allowed_cores())
    if explicit or pin_workers:
        cores = parse_cores(explicit, avail) if explicit else derive_cores(index, per_worker, avail)
        return CoreSet(cores, pinned=True, threads=threads or len(cores))
    return CoreSet(avail, pinned=False, threads=threads or min(per_worker, len(avail)))


def pin(cores: list[int]) -> None:
    os.sched_setaffinity(0, cores)
