"""Answering a JSONL file of requests: in order, a bounded window in flight, resumable.

Requests are submitted ahead of the line being written (up to `window` of them) so the
scheduler can batch them and reuse snapshots of repeated states; answers are written strictly
in input order. A re-run with the same output file skips the lines already answered; a
partially written last line (the previous run was killed mid-write) is dropped and redone.
"""
from __future__ import annotations

import json
import sys
from collections import deque
from concurrent.futures import Future
from pathlib import Path
from typing import Callable

from tqdm import tqdm

AnswerFn = Callable[[str], "Future[dict]"]


def answered_lines(out_path: Path) -> int:
    """Complete lines already in `out_path`; a torn last line is cut off."""
    if not out_path.exists():
        return 0
    data = out_path.read_bytes()
    complete = data[: data.rfind(b"\n") + 1]
    if len(complete) != len(data):
        with out_path.open("r+b") as fh:
            fh.truncate(len(complete))
    return complete.count(b"\n")


def run_jsonl(in_path: Path, out_path: Path, answer: AnswerFn, *, window: int = 64) -> tuple[int, int]:
    """Answer every line of `in_path` not yet in `out_path`. Returns (answered now, skipped)."""
    lines = in_path.read_text(encoding="utf-8").splitlines()
    done = answered_lines(out_path)
    if done > len(lines):
        raise ValueError(f"{out_path} has {done} lines but {in_path} only {len(lines)}: not its output")
    todo = iter(enumerate(lines[done:], start=done))
    inflight: deque[Future[dict]] = deque()
    written = 0
    with out_path.open("a", encoding="utf-8") as out, tqdm(
        total=len(lines), initial=done, unit="req", file=sys.stderr, desc="decide", dynamic_ncols=True
    ) as bar:
        for _, line in todo:
            inflight.append(answer(line))
            if len(inflight) >= window:
                written += _write(out, inflight.popleft(), bar)
        while inflight:
            written += _write(out, inflight.popleft(), bar)
    return written, done


def _write(out, future: "Future[dict]", bar: tqdm) -> int:
    out.write(json.dumps(future.result(), ensure_ascii=False) + "\n")
    out.flush()
    bar.update(1)
    return 1
