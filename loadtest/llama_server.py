"""llama.cpp's `llama-server`, built on demand from the llama-cpp-python source distribution.

No binary is committed: the first sweep that asks for the llama-server target takes the sdist
of the llama-cpp-python version we run (shared/llama_build.sdist: pip download --no-binary, from
PyPI like every other dependency, kept in the cache dir), configures its vendored llama.cpp with
only what the server needs (no web UI, no network fetches, static libraries) and builds the one
target at nice 19 with 2 jobs, for the same instruction-set level as the venv's llama-cpp-python
(LLAMA_BUILD, x86-64-v3 by default: both sides of a comparison run the same kernels). The binary
is kept in the cache dir by that build's name; later sweeps reuse it.
"""
from __future__ import annotations

import shutil
from pathlib import Path

from shared.llama_build import build_name, installed_level, sdist, source_build

__all__ = ["ensure_llama_server", "binary_path", "sdist"]

CMAKE_FLAGS = [
    "-DBUILD_SHARED_LIBS=OFF",
    "-DLLAMA_BUILD_SERVER=ON",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_BUILD_UI=OFF",
    "-DLLAMA_USE_PREBUILT_UI=OFF",  # otherwise the configure step downloads web UI assets
    "-DLLAMA_OPENSSL=OFF",
    "-DLLAMA_CURL=OFF",
]


def level() -> str:
    """The instruction-set level of the venv's llama-cpp-python, as the Makefile installed it."""
    return installed_level()


def binary_path(cache: Path, build_level: str = "") -> Path:
    """Keyed by the build's name (version, level, compiler): a binary of another level is not reused."""
    return cache / "llama-server" / build_name(build_level or level()) / "llama-server"


def ensure_llama_server(cache: Path, build_level: str = "") -> Path:
    """The cached llama-server binary built for `build_level` (default: the venv's llama.cpp level;
    "native": this CPU), building it first if there is none (10–20 min here)."""
    build_level = build_level or level()
    target = binary_path(cache, build_level)
    if target.is_file():
        return target
    log_path = target.parent / "build.log"
    print(f"building llama-server ({build_level}) from the llama-cpp-python sdist (once; log: {log_path})", flush=True)
    with source_build(build_level, "llama-server", CMAKE_FLAGS, log_path, cache) as build:
        shutil.copy2(build / "bin" / "llama-server", target)
    print(f"llama-server ready: {target}", flush=True)
    return target
