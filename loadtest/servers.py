"""Starting and stopping the servers a sweep measures: our fleet and the two baselines.

Each is a context manager yielding the base URL once the server answers its readiness check,
and stopping the process it started (and only that) on the way out. Every server gets the same
GGUF and the same two cores' worth of threads; logs go to the run directory.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Callable, Iterator

ROOT = Path(__file__).resolve().parent.parent
READY_TIMEOUT_S = 300.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def call(url: str, body: object = None, timeout: float = 5.0) -> tuple[int, bytes]:
    """(status, body) of a GET, or of a JSON POST when `body` is given; status 0 when nothing answers."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"} if data else {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()
    except OSError:
        return 0, b""


def fleet_ready(url: str) -> bool:
    status, body = call(url + "/health")
    try:
        return status == 200 and json.loads(body).get("status") == "ready"
    except ValueError:
        return False


def answers_200(path: str) -> Callable[[str], bool]:
    return lambda url: call(url + path)[0] == 200


@contextmanager
def running(name: str, cmd: list[str], port: int, ready: Callable[[str], bool], log_dir: Path,
            env: dict[str, str] | None = None) -> Iterator[str]:
    """Run `cmd` (which serves on 127.0.0.1:`port`) until the block ends."""
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / f"{name}.log"
    url = f"http://127.0.0.1:{port}"
    with log_path.open("w") as log:
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                                env={**os.environ, **(env or {})})
    try:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while not ready(url):
            if proc.poll() is not None:
                raise RuntimeError(f"{name} exited ({proc.returncode}) before it was ready; "
                                   f"see {log_path}:\n{log_path.read_text()[-2000:]}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"{name} not ready after {READY_TIMEOUT_S:.0f}s; see {log_path}")
            time.sleep(0.5)
        yield url
    finally:
        stop(proc)


def stop(proc: subprocess.Popen, timeout: float = 90.0) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def jevfleet(log_dir: Path, name: str = "jevfleet", flags: tuple[str, ...] = ()) -> AbstractContextManager[str]:
    """Our fleet as `jevfleet serve` runs it (supervisord, gateway, workers per the config),
    with `flags` added to its command line."""
    port = free_port()
    cmd = [sys.executable, "-m", "jevfleet", "serve", "--port", str(port), "--run-dir", str(log_dir / name), *flags]
    return running(name, cmd, port, fleet_ready, log_dir)


def llama_cpp_python(gguf: Path, log_dir: Path, *, threads: int, ctx: int) -> AbstractContextManager[str]:
    """llama-cpp-python's OpenAI-compatible server, as its README starts it. Its default
    logits_all=True (needed for logprobs) allocates ctx × vocabulary floats, so keep ctx small."""
    port = free_port()
    cmd = [sys.executable, "-m", "llama_cpp.server", "--model", str(gguf), "--host", "127.0.0.1",
           "--port", str(port), "--n_threads", str(threads), "--n_threads_batch", str(threads),
           "--n_ctx", str(ctx)]
    return running("llama-cpp-python", cmd, port, answers_200("/v1/models"), log_dir)


def llama_server(binary: Path, gguf: Path, log_dir: Path, *, threads: int, ctx: int, slots: int) -> AbstractContextManager[str]:
    """llama.cpp's own server: `slots` parallel sequences with continuous batching, and
    --swa-full so Gemma 3's sliding-window layers keep whole prompts and prefixes are reused."""
    port = free_port()
    cmd = [str(binary), "-m", str(gguf), "--host", "127.0.0.1", "--port", str(port), "-t", str(threads),
           "-c", str(ctx * slots), "-np", str(slots), "--swa-full", "--no-webui"]
    return running("llama-server", cmd, port, answers_200("/health"), log_dir)
