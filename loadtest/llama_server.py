"""llama.cpp's `llama-server`, built on demand from the llama-cpp-python source distribution.

No binary is committed: the first sweep that asks for the llama-server target takes the sdist
of the llama-cpp-python version we run (pip download --no-binary, from PyPI like every other
dependency, kept in the cache dir: sdist()), configures its vendored llama.cpp with only what the server needs (no web
UI, no network fetches, static libraries) and builds the one target at nice 19 with 2 jobs.
The binary is kept in the cache dir, keyed by version and build flags; later sweeps reuse it.
"""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from importlib.metadata import version
from pathlib import Path

from tqdm import tqdm

from shared.llama import no_amx_flags

CMAKE_FLAGS = [
    "-DCMAKE_BUILD_TYPE=Release",
    "-DBUILD_SHARED_LIBS=OFF",
    "-DLLAMA_BUILD_SERVER=ON",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_BUILD_UI=OFF",
    "-DLLAMA_USE_PREBUILT_UI=OFF",  # otherwise the configure step downloads web UI assets
    "-DLLAMA_OPENSSL=OFF",
    "-DLLAMA_CURL=OFF",
]
JOBS = 2
PROGRESS = re.compile(r"^\[\s*(\d+)(?:/(\d+)|%)\]")  # ninja's "[n/m] ...", make's "[ 42%] ..."


def binary_path(cache: Path) -> Path:
    """Keyed by version, and by no_amx_flags, which llama-server is built with as llama-cpp-python
    is (both sides of a comparison run the same kernels): a binary built with AMX is not reused."""
    suffix = "-no-amx" if no_amx_flags() else ""
    return cache / "llama-server" / f"{version('llama-cpp-python')}{suffix}" / "llama-server"


def sdist(cache: Path) -> Path:
    """llama-cpp-python's source distribution of the installed (pinned) version, fetched once from
    PyPI into the cache dir: llama-server's source here, the model zoo's tokenizers and templates
    (bench/zoo.py)."""
    ver = version("llama-cpp-python")
    target = cache / "src" / f"llama_cpp_python-{ver}.tar.gz"
    if not target.is_file():
        target.parent.mkdir(parents=True, exist_ok=True)
        print(f"fetching the llama-cpp-python {ver} source distribution (once)", flush=True)
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-binary", ":all:", "--no-deps",
                        "--progress-bar", "off", "-d", str(target.parent), f"llama-cpp-python=={ver}"], check=True)
    return target


def ensure_llama_server(cache: Path) -> Path:
    """The cached llama-server binary, building it first if there is none (10–20 min here)."""
    target = binary_path(cache)
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    log_path = target.parent / "build.log"
    ver = version("llama-cpp-python")
    print(f"building llama-server from the llama-cpp-python {ver} sdist (once; log: {log_path})", flush=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp, log_path.open("w") as log:
        work = Path(tmp)
        with tarfile.open(sdist(cache)) as tar:
            tar.extractall(work, filter="data")
        source = next(work.glob("llama_cpp_python-*/vendor/llama.cpp"))
        build = work / "build"
        generator = ["-G", "Ninja"] if shutil.which("ninja") else []
        flags = no_amx_flags()
        no_amx = [f"-DCMAKE_C_FLAGS={flags}", f"-DCMAKE_CXX_FLAGS={flags}"] if flags else []
        _run(["nice", "-n", "19", "cmake", "-S", str(source), "-B", str(build), *generator, *CMAKE_FLAGS, *no_amx], log)
        _run(["nice", "-n", "19", "cmake", "--build", str(build), "--target", "llama-server", "-j", str(JOBS)],
             log, progress=True)
        shutil.copy2(build / "bin" / "llama-server", target)
    print(f"llama-server ready: {target}", flush=True)
    return target


def _run(cmd: list[str], log, *, progress: bool = False) -> None:
    log.write(f"$ {' '.join(cmd)}\n")
    log.flush()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    bar = tqdm(desc="llama-server build", unit="step", disable=not progress)
    for line in proc.stdout:
        log.write(line)
        match = PROGRESS.match(line)
        if match:
            bar.total = int(match.group(2) or 100)
            bar.n = int(match.group(1))
            bar.refresh()
    bar.close()
    if proc.wait() != 0:
        raise RuntimeError(f"{cmd[0] if cmd[0] != 'nice' else cmd[3]} failed ({proc.returncode}); see {log.name}")
