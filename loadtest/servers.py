"""Starting and stopping the servers a sweep measures: our fleet and the two baselines.

Each is a context manager yielding the base URL once the server answers its readiness check,
and stopping the process it started (and only that) on the way out. Every server gets the same
GGUF and the same two cores' worth of threads; logs go to the run directory.
"""
from __future__ import annotations

import os
import subprocess
import sys
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Callable, Iterator

from client.net import free_port, probe
from jevfleet.harness.fleet import start_fleet
from jevfleet.harness.processes import stop_process, wait_until
from loadtest.llama_server import ensure_llama_server
from shared import llama_build
from shared.config import PROJECT_ROOT, load_settings
from shared.model_files import resolve_model
from shared.profiles import Profile

READY_TIMEOUT_S = 300.0
# The baselines as the sweep runs them by default (its --threads, --baseline-ctx, --slots).
BASELINE_THREADS = os.cpu_count() or 2
BASELINE_CTX = 1024  # context per sequence (llama-cpp-python allocates ctx × vocab logits)
SLOTS = 8  # llama-server's parallel slots


def answers_200(path: str) -> Callable[[str], bool]:
    """A readiness check: GET `path` answers 200."""
    return lambda url: probe("GET", url + path)[0] == 200


@contextmanager
def running(name: str, cmd: list[str], port: int, ready: Callable[[str], bool], log_dir: Path,
            env: dict[str, str] | None = None) -> Iterator[str]:
    """Run `cmd` (which serves on 127.0.0.1:`port`) until the block ends."""
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / f"{name}.log"
    url = f"http://127.0.0.1:{port}"
    with log_path.open("w") as log:
        proc = subprocess.Popen(cmd, cwd=PROJECT_ROOT, stdout=log, stderr=subprocess.STDOUT,
                                env={**os.environ, **(env or {})})
    try:
        wait_until(lambda: ready(url), f"{name} ready", timeout=READY_TIMEOUT_S, every=0.5, proc=proc,
                   logs=lambda: f"see {log_path}:\n{log_path.read_text()[-2000:]}")
        yield url
    finally:
        stop_process(proc)


@contextmanager
def jevfleet(log_dir: Path, name: str = "jevfleet", flags: tuple[str, ...] = (),
             env: dict[str, str] | None = None) -> Iterator[str]:
    """Our fleet as `jevfleet serve` runs it (supervisord, gateway, workers per the config),
    with `flags` added to its command line and `env` to its environment; its run directory (and
    logs) in log_dir/name."""
    fleet = start_fleet(log_dir / name, workers=None, extra=list(flags), env=env, timeout=READY_TIMEOUT_S)
    try:
        yield fleet.url
    finally:
        fleet.stop()


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


def ours_or_llama_server(target: str, profile: Profile, log_dir: Path) -> AbstractContextManager[str]:
    """`jevfleet` ("jevfleet": its defaults; "jevfleet-native": the same on llama.cpp built for this
    CPU, shared/llama_build.py, instead of the portable build) or llama-server ("llama-server": as
    the sweep starts it, on the profile's GGUF; "llama-server-native": built for this CPU), started
    fresh: for the benchmarks that send them the same requests."""
    if target == "jevfleet":
        return jevfleet(log_dir)
    if target == "jevfleet-native":
        return jevfleet(log_dir, target, env={"LLAMA_CPP_LIB_PATH": str(llama_build.libs("native"))})
    settings = load_settings()
    gguf = resolve_model(profile, settings.cache_path, settings.model)
    binary = ensure_llama_server(settings.cache_path, "native" if target == "llama-server-native" else "")
    return llama_server(binary, gguf, log_dir,
                        threads=BASELINE_THREADS, ctx=BASELINE_CTX, slots=SLOTS)
