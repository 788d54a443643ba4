"""`jevfleet decide`: the server's answer to a request file, without a server.

The answers come from client/local.py (the gateway's request path and a worker's scheduler and
engine in this process). Requests of a JSONL file are submitted ahead, so the scheduler batches
them and the state snapshots serve repeated states.
"""
from __future__ import annotations

import json
import sys
from concurrent.futures import Future
from pathlib import Path

from client.local import Answer, LocalDecider
from gateway.errors import error_json
from quality.derived import calibrated_serving_profile
from shared.config import Settings


def decide_file(settings: Settings, request: Path, output: Path | None) -> int:
    """One request file: the answer on stdout (and in `output`), or the error body on stderr."""
    if output is not None and output.exists():
        print(f"decide: {output} exists; not overwriting it", file=sys.stderr)
        return 1
    try:
        raw = request.read_bytes()
    except OSError as exc:
        print(f"decide: cannot read {request}: {exc.strerror}", file=sys.stderr)
        return 1
    decider = LocalDecider(settings, calibrated_serving_profile(settings))
    try:
        answer = decider.answer(raw).result()
    finally:
        decider.close()
    if answer.status != 200:
        print(error_json(answer.body), file=sys.stderr)  # the body the server would send
        return 1
    text = json.dumps(answer.body, indent=2, ensure_ascii=False)
    if output is not None:
        try:
            with output.open("x", encoding="utf-8") as fh:  # "x": never overwrite, even in a race
                fh.write(text + "\n")
        except FileExistsError:
            print(f"decide: {output} exists; not overwriting it", file=sys.stderr)
            return 1
    print(text)
    return 0


def decide_jsonl(settings: Settings, requests: Path, output: Path) -> int:
    """Many requests, one per line; errors become {"error": body} lines; resumable."""
    from jevfleet.jsonl import run_jsonl

    decider = LocalDecider(settings, calibrated_serving_profile(settings))

    def line_of(answer: Answer) -> dict:
        return answer.body if answer.status == 200 else {"error": answer.body}

    def answer(line: str) -> Future[dict]:
        wrapped: Future[dict] = Future()
        decider.answer(line.encode("utf-8")).add_done_callback(lambda f: wrapped.set_result(line_of(f.result())))
        return wrapped

    try:
        written, skipped = run_jsonl(requests, output, answer)
    finally:
        decider.close()
    print(f"decide: {written} answered, {skipped} already in {output}", file=sys.stderr)
    return 0
