"""Each zoo file served as a user would (issue 38): `jevfleet serve --model FILE` at its defaults,
and what a user sees of it.

    python -m bench.zoo_serve [NAME ...] [--mode fast] [--first]    # make bench NAME=zoo BENCH_ARGS=--speed

Per file (bench/zoo.py builds it first if it is not in the cache): the outcome (ready, or the
one-line refusal and the exit status), seconds from the command to /health's "ready" (a file's
first serve fits its calibration first: said, with the items and seconds from the record), the
workers' and the gateway's RSS at ready, the start-up canary's readout gap (the largest |logit
from h - llama.cpp's| over the largest |logit|) and its exact-reading check (the served margins'
largest move from llama.cpp's exact reading, as a share of the margins' scale), both from the
worker's log, and one request answered. The fleet is then stopped with SIGTERM. One JSON line
per file.

With --speed, each file that became ready is then measured beside llama-server on the same file
and cores, by the project's own benchmarks with JEV_MODEL=FILE, one after the other: bench.floor
(first-seen W1/W3/W4 at one client, request by request: fleet ÷ floor and llama-server ÷ floor),
loadtest.sweep (first-seen W1/W3/W4 at 1 and 4 clients: answers/s of both, into
OUT/NAME/results.md) and bench.consistency (first-seen W1 at 1 vs 8 clients, bit for bit, served
uncalibrated: a random-weight file's fitted calibration is flat, so every P would be equal). Their
sizes are cut for files that are 4-10x the default model (the arguments below). Not run by the
tests; quote it with the load average.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

from bench import zoo
from client.net import post_json, probe
from jevfleet.harness.load import rss_kb
from jevfleet.harness.processes import wait_until
from shared.config import load_settings
from shared.derive import calibration_record, derive_profile
from shared.gguf_file import layer_bytes
from shared.model_files import file_sha256

READY_WITHIN_S = 1800  # a 4B file's first serve: load, shapes, calibration (a refusal comes in seconds)
GAP = re.compile(r"answer logits within ([0-9.e+-]+) of llama")
EXACT = re.compile(r"margins within ([0-9.]+) % of the margins' scale")
BODY = {"model": "jev-latest", "state": "I was charged twice for the same order.",
        "questions": {"billing": {"type": "noul", "instructions": "Is this a billing problem?"}}}


def _health(port: int) -> dict:
    """/health's body, or {} while nothing answers."""
    status, _, body = probe("GET", f"http://127.0.0.1:{port}/health")
    return json.loads(body) if status == 200 else {}


def _rss_mib(serve: psutil.Process, role: str) -> list[int]:
    """RSS of each of serve's descendants running `jevfleet ROLE`, in MiB."""
    out = []
    for proc in serve.children(recursive=True):
        try:
            if f"jevfleet {role}" in " ".join(proc.cmdline()):
                out.append(round(rss_kb(proc.pid) / 1024))
        except (psutil.NoSuchProcess, FileNotFoundError):
            continue
    return out


def _calibration_record(model: Path) -> Path | None:
    """Where the calibration of the profile derived from `model` is kept (None: it has none)."""
    try:
        return calibration_record(load_settings().cache_path, derive_profile(model))
    except Exception:  # a file whose profile cannot be derived has no calibration to show
        return None


def _read(record: Path | None) -> dict | None:
    return json.loads(record.read_text()) if record and record.is_file() else None


def forget(model: Path) -> list[Path]:
    """Remove what a file's first serve records (its calibration, its exact-reading figures), so
    that the next serve is a first one; the shape record (per CPU and build) is kept."""
    cache = load_settings().cache_path
    kept = [_calibration_record(model), *(cache / "exact").glob(f"{file_sha256(model)[:16]}-*.json")]
    gone = [path for path in kept if path and path.is_file()]
    for path in gone:
        path.unlink()
    return gone


def serve_once(model: Path, port: int, flags: list[str]) -> dict:
    """Start, wait for ready or exit, measure, ask once, stop."""
    record = _calibration_record(model)
    fitted_before = _read(record)
    run_dir = Path(tempfile.mkdtemp(prefix="jev-zoo-"))
    cmd = [sys.executable, "-m", "jevfleet", "serve", "--model", str(model), "--port", str(port),
           "--run-dir", str(run_dir), *flags]
    log = open(run_dir / "serve.log", "w")
    start = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    row: dict = {"file": model.name, "MiB": round(model.stat().st_size / 2**20)}
    try:
        try:
            health = wait_until(lambda: _health(port), "ready", done=lambda h: h.get("status") == "ready",
                                timeout=READY_WITHIN_S, every=0.5, proc=proc)
        except RuntimeError:  # serve exited: a refusal, whose last line says why
            lines = (run_dir / "serve.log").read_text().strip().splitlines()
            row.update(outcome=f"exit {proc.returncode}", seconds=round(time.monotonic() - start, 1),
                       line=lines[-1] if lines else "")
            return row
        except TimeoutError:
            row.update(outcome="not ready", seconds=READY_WITHIN_S)
            return row
        row["seconds"] = round(time.monotonic() - start, 1)
        serve = psutil.Process(proc.pid)
        row.update(outcome="ready", worker_rss=_rss_mib(serve, "worker"), gateway_rss=_rss_mib(serve, "gateway"),
                   workers=len(health["workers"]),
                   answer=post_json(f"http://127.0.0.1:{port}/v1/systemone", BODY, timeout=120)[2]["answers"])
        worker_log = "\n".join(p.read_text() for p in sorted(run_dir.glob("worker_*.log")))
        gap, exact = GAP.search(worker_log), EXACT.search(worker_log)
        row.update(readout_gap=float(gap.group(1)) if gap else None, exact_pct=float(exact.group(1)) if exact else None)
        fitted = _read(record)
        if fitted and not fitted_before:
            row["calibrated_now"] = {"items": fitted["items"], "seconds": fitted["seconds"]}
        return row
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=120)
        log.close()


def speed(name: str, model: Path, out: Path, mode: str) -> None:
    """bench.floor, the sweep and bench.consistency on this file, each printing its own figures."""
    env = {**os.environ, "JEV_MODEL": str(model), **({"JEV_MODE": mode} if mode else {})}
    big = layer_bytes(model) > 2**30  # the 2-4B files: half the requests, each 2-3x as long
    # W3-fresh's first pass over its five states takes most of 90 s on those (Phi-3.5: ~20 s a state):
    # a shorter cell measures fresh reads only, never the kept states the workload is about
    w3_seconds = 300 if big else 90
    runs = [["bench.floor", "--requests", "W1-fresh=15,W3-fresh=20,W4-fresh=2" if big else "W1-fresh=30,W3-fresh=40,W4-fresh=4"],
            ["loadtest.sweep", "--target", "jevfleet,llama-server", "--users", "1,4", "--workload",
             "W1-fresh,W3-fresh,W4-fresh", "--duration", f"20s,W3-fresh={w3_seconds}s,W4-fresh=60s", "--rounds", "1",
             "--out", str(out / name)],
            ["bench.consistency", "--requests", "64", "--clients", "8", "--targets", "jevfleet"]]
    for run in runs:
        print(f"# {name}: python -m {' '.join(run)}  (load average {os.getloadavg()})", flush=True)
        # bit for bit on the raw margins: a random-weight file's calibration is flat (every P the same)
        uncalibrated = {"JEV_DERIVED_CALIBRATION": "0"} if run[0] == "bench.consistency" else {}
        subprocess.run([sys.executable, "-m", *run], env={**env, **uncalibrated}, check=False)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help="zoo recipes (default: every one but the tiny ones)")
    parser.add_argument("--port", type=int, default=8117)
    parser.add_argument("--mode", default="", help="serve's --mode (default: the setting's, deterministic)")
    parser.add_argument("--speed", action="store_true", help="then bench.floor, loadtest.sweep and bench.consistency")
    parser.add_argument("--first", action="store_true", help="forget each file's calibration and exact-reading "
                        "records, serve it (a first serve), then serve it again (a later start)")
    parser.add_argument("--out", type=Path, default=Path("docs/benchmarks/zoo"), help="the sweeps' results")
    args = parser.parse_args(argv)
    names = args.names or [n for n in zoo.RECIPES if not n.endswith("-tiny")]
    flags = ["--mode", args.mode] if args.mode else []
    print(f"load average at start: {os.getloadavg()}", flush=True)
    for name in names:
        model = zoo.build(name, zoo.zoo_dir())
        if args.first:
            print(f"# {name}: forgot {', '.join(p.name for p in forget(model)) or 'nothing'}", flush=True)
        for start in ("first", "later") if args.first else ("",):
            row = serve_once(model, args.port, flags)
            row["sha256"] = file_sha256(model)[:12]
            print(json.dumps({"name": name, **({"start": start} if start else {}), **row}), flush=True)
        if args.speed and row["outcome"] == "ready":
            speed(name, model, args.out, args.mode)
    print(f"load average at end: {os.getloadavg()}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
