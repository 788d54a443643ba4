"""Which cores a worker is pinned to: given explicitly ("2-3", "0,2"), or derived from its
process number so that worker k of a fleet takes cores [k*n, (k+1)*n) of this machine."""
from __future__ import annotations

import os


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
    avail = set(available if available is not None else os.sched_getaffinity(0))
    if not set(cores) <= avail:
        raise ValueError(f"--cores {spec!r}: cores {sorted(set(cores) - avail)} are not available "
                         f"(this process may use {sorted(avail)})")
    return sorted(set(cores))


def derive_cores(index: int, per_worker: int, available: list[int] | None = None) -> list[int]:
    """Worker `index`'s share; wraps around when there are more workers than core sets."""
    avail = sorted(available if available is not None else os.sched_getaffinity(0))
    per = max(1, min(per_worker, len(avail)))
    sets = max(1, len(avail) // per)
    start = (index % sets) * per
    return avail[start : start + per]


def pin(cores: list[int]) -> None:
    os.sched_setaffinity(0, cores)
