"""Which llama.cpp the project runs: one portable build, the same on every x86-64 machine.

llama.cpp picks its CPU kernels when it is compiled, and a native build (-march=native) of it
takes AVX-512 code on one machine and AVX2 code on another: the same prompt then gives other
bits, and a binary made on the first stops with an illegal instruction on the second. So the
project builds llama-cpp-python for one fixed instruction-set level, x86-64-v3 (AVX2, FMA, F16C,
BMI2; no AVX-512, no AMX), with GGML_NATIVE off: every CPU of that level or newer runs the same
code and computes the same bits (the gateway checks it: shared/serving.py's `arithmetic`).

Invariant: a build is kept in the cache dir under a name made of everything that decides its
code (llama-cpp-python's version, the level's flags, the compiler's version), and a venv records
the name of the build it has installed (`.llama-build` in the venv), so a changed recipe is built
and installed again, and an unchanged one never is.

`make serve`, `make test` and the image install the level LLAMA_BUILD names (x86-64-v3 by
default; `native` on request). x86-64-v2 (SSE4.2, no AVX) exists for the test that a worker
whose arithmetic differs is refused (tests/test_arithmetic.py): it is built as llama.cpp's
libraries only, for LLAMA_CPP_LIB_PATH, not as a wheel.

Standard library only: the Makefile runs this with the system Python before the venv has any
package.

    python3 -m shared.llama_build install --python .venv/bin/python [--level x86-64-v3]
    python3 -m shared.llama_build libs --level x86-64-v2      # prints the libraries' directory
"""
from __future__ import annotations

import argparse
import fcntl
import hashlib
import os
import platform
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

VERSION = "0.3.36"  # llama-cpp-python, as pinned in pyproject.toml (tests/test_llama_build.py checks)
DEFAULT_LEVEL = "x86-64-v3"
_X86 = ("SSE42", "AVX", "AVX2", "FMA", "F16C", "BMI2", "AVX_VNNI", "AVX512", "AVX512_VBMI", "AVX512_VNNI",
        "AVX512_BF16", "AMX_TILE", "AMX_INT8", "AMX_BF16")
# The ggml options each level turns on; every other x86 option of _X86 is set off explicitly.
LEVELS: dict[str, tuple[str, ...]] = {
    "x86-64-v3": ("SSE42", "AVX", "AVX2", "FMA", "F16C", "BMI2"),
    "x86-64-v2": ("SSE42",),
    "native": (),  # -march=native, AMX kept out (no_amx_flags)
}
# Parts of llama-cpp-python the project does not load: the multimodal library costs a minute.
COMMON_ARGS = ("-DLLAVA_BUILD=OFF",)
JOBS = 2
PROGRESS = re.compile(r"\[\s*(\d+)%\]|\[(\d+)/(\d+)\]")  # make's "[ 42%]", ninja's "[12/80]"


def no_amx_flags() -> str:
    """C/C++ compiler flags that keep Intel AMX out of a native build ("" off x86_64): -march=native
    turns AMX on where the CPU lists it, some VMs list it and then fault on its first tile
    instruction (SIGILL in llama_decode), and deterministic mode's shape rules cover the repacked
    and tiled kernels, not AMX's (docs/architecture.md). The fixed levels never enable it."""
    return "-mno-amx-tile -mno-amx-int8 -mno-amx-bf16" if platform.machine() == "x86_64" else ""


def cmake_args(level: str) -> list[str]:
    """The CMake options of a level's build (ValueError for an unknown level)."""
    if level not in LEVELS:
        raise ValueError(f"unknown llama.cpp build level {level!r}; one of {', '.join(LEVELS)}")
    if level == "native":
        return [*COMMON_ARGS, "-DGGML_NATIVE=ON"]  # with build_env's no_amx_flags
    on = LEVELS[level]
    return [*COMMON_ARGS, "-DGGML_NATIVE=OFF", *(f"-DGGML_{name}={'ON' if name in on else 'OFF'}" for name in _X86)]


def build_env(level: str) -> dict[str, str]:
    """The environment of a level's build: its CMake options for llama-cpp-python's build backend,
    and, for native, the compiler flags that keep AMX out (CFLAGS, read by CMake at configure)."""
    env = {**os.environ, "CMAKE_ARGS": " ".join(cmake_args(level)), "CMAKE_BUILD_PARALLEL_LEVEL": str(JOBS)}
    for name in ("CFLAGS", "CXXFLAGS"):
        env[name] = no_amx_flags() if level == "native" else ""
    return env


def _compiler() -> str:
    out = subprocess.run(["cc", "--version"], capture_output=True, text=True)
    return out.stdout.splitlines()[0] if out.returncode == 0 and out.stdout else "cc unknown"


def build_name(level: str) -> str:
    """The name a level's build is kept under: version, level and a digest of its recipe (the
    CMake options and the compiler, which decide the code; native also of this CPU's flags)."""
    env = build_env(level)
    recipe = [VERSION, platform.machine(), env["CMAKE_ARGS"], env["CFLAGS"], _compiler()]
    if level == "native":
        recipe.append(_cpu_flags())
    return f"{VERSION}-{level}-{hashlib.sha256(repr(recipe).encode()).hexdigest()[:12]}"


def _cpu_flags() -> str:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor()
    match = re.search(r"^flags\s*:(.*)$", text, re.M)
    return " ".join(sorted(match.group(1).split())) if match else ""


def cache_root(cache_dir: str | Path | None = None) -> Path:
    """The settings' cache_dir (JEV_CACHE_DIR; empty = ~/.cache/jevfleet, as shared/config.py says)."""
    value = cache_dir or os.environ.get("JEV_CACHE_DIR") or Path.home() / ".cache" / "jevfleet"
    return Path(value) / "llama-cpp"


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    """One builder at a time per build (two make runs, or serve beside test)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def sdist(cache_dir: str | Path | None = None) -> Path:
    """llama-cpp-python's source distribution, fetched once from PyPI into the cache dir: the
    source of every build here, of llama-server (loadtest/llama_server.py) and of the model zoo's
    tokenizers and templates (bench/zoo.py)."""
    target = cache_root(cache_dir).parent / "src" / f"llama_cpp_python-{VERSION}.tar.gz"
    with _locked(target.with_suffix(".lock")):
        if not target.is_file():
            print(f"fetching the llama-cpp-python {VERSION} source distribution (once)", flush=True)
            subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-binary", ":all:", "--no-deps",
                            "--progress-bar", "off", "-d", str(target.parent), f"llama-cpp-python=={VERSION}"],
                           check=True)
    return target


def run_logged(cmd: list[str], log_path: Path, what: str, env: dict[str, str] | None = None) -> None:
    """Run a build step at nice 19, its output to `log_path`; a line at every tenth of progress."""
    shown = -10
    started = time.monotonic()
    with log_path.open("a") as log:
        log.write(f"$ {' '.join(cmd)}\n")
        log.flush()
        proc = subprocess.Popen(["nice", "-n", "19", *cmd], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, env=env)
        for line in proc.stdout:
            log.write(line)
            match = PROGRESS.search(line)
            if match:
                done = int(match.group(1)) if match.group(1) else 100 * int(match.group(2)) // int(match.group(3))
                if done >= shown + 10:
                    shown = done - done % 10
                    print(f"  {what}: {done:3d} % ({time.monotonic() - started:.0f} s)", flush=True)
        if proc.wait() != 0:
            raise RuntimeError(f"{what} failed (exit {proc.returncode}); its log: {log_path}")


def wheel(level: str = DEFAULT_LEVEL, cache_dir: str | Path | None = None, python: str = sys.executable) -> Path:
    """The llama-cpp-python wheel of `level`, built once into the cache dir (about 7 min on two
    cores). pip's own wheel cache is bypassed: it keys a built wheel by the source alone, not by
    CMAKE_ARGS, and would hand back a build of another level."""
    target_dir = cache_root(cache_dir) / build_name(level)
    with _locked(target_dir.with_suffix(".lock")):
        found = sorted(target_dir.glob("llama_cpp_python-*.whl"))
        if found:
            return found[0]
        source = sdist(cache_dir)
        print(f"building llama.cpp ({level}) into {target_dir} (once, ~7 min on two cores)", flush=True)
        target_dir.parent.mkdir(parents=True, exist_ok=True)
        tmp = tempfile.mkdtemp(dir=target_dir.parent)
        try:
            run_logged([python, "-m", "pip", "wheel", "--verbose", "--no-deps", "--no-cache-dir", "--no-binary",
                         "llama-cpp-python", "-w", tmp, str(source)], Path(tmp).parent / f"{build_name(level)}.log",
                        f"llama.cpp {level} build", build_env(level))
            built = next(Path(tmp).glob("llama_cpp_python-*.whl"))
            os.replace(tmp, target_dir)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return target_dir / built.name


def install(python: str, level: str = DEFAULT_LEVEL, cache_dir: str | Path | None = None) -> bool:
    """Install `level`'s wheel into the venv of `python` unless the venv records that build
    already; True when it installed."""
    marker = Path(python).absolute().parent.parent / ".llama-build"  # <venv>/bin/python -> <venv>
    name = build_name(level)
    if marker.is_file() and marker.read_text().strip() == name:
        return False
    built = wheel(level, cache_dir, python)
    subprocess.run([python, "-m", "pip", "install", "--quiet", "--no-deps", "--force-reinstall", str(built)],
                   check=True)
    marker.write_text(name + "\n")
    print(f"llama-cpp-python {VERSION} for {level} installed ({name})", flush=True)
    return True


@contextmanager
def source_build(level: str, target: str, options: list[str], log_path: Path,
                 cache_dir: str | Path | None = None) -> Iterator[Path]:
    """One CMake target of the vendored llama.cpp built for `level` in a temporary directory (its
    build tree while the block runs): the sdist unpacked, configured with `options` besides the
    level's own, built with JOBS jobs at nice 19, its progress printed, its output in `log_path`."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log_path.unlink(missing_ok=True)
    work = Path(tempfile.mkdtemp(dir=log_path.parent))
    try:
        with tarfile.open(sdist(cache_dir)) as tar:
            tar.extractall(work, filter="data")
        source = next(work.glob("llama_cpp_python-*/vendor/llama.cpp"))
        generator = ["-G", "Ninja"] if shutil.which("ninja") else []
        level_options = [a for a in cmake_args(level) if not a.startswith("-DLLAVA")]
        env = build_env(level)
        run_logged(["cmake", "-S", str(source), "-B", str(work / "build"), *generator, "-DCMAKE_BUILD_TYPE=Release",
                    *options, *level_options], log_path, f"{target} ({level}) configure", env)
        run_logged(["cmake", "--build", str(work / "build"), "--target", target, "-j", str(JOBS)], log_path,
                   f"{target} ({level}) build", env)
        yield work / "build"
    finally:
        shutil.rmtree(work, ignore_errors=True)


def libs(level: str, cache_dir: str | Path | None = None) -> Path:
    """A directory with llama.cpp's shared libraries of `level` (libllama and ggml's), for
    LLAMA_CPP_LIB_PATH: the library target alone, no tools, no common library, no Python
    package, so a second level for a test costs only ggml's CPU backend and llama's sources."""
    target = cache_root(cache_dir) / f"{build_name(level)}-libs"
    with _locked(target.with_suffix(".lock")):
        if (target / "libllama.so").is_file():
            return target
        print(f"building llama.cpp's libraries ({level}) into {target} (once, ~4 min on two cores)", flush=True)
        options = ["-DBUILD_SHARED_LIBS=ON", "-DLLAMA_BUILD_COMMON=OFF", "-DLLAMA_BUILD_TESTS=OFF",
                   "-DLLAMA_BUILD_EXAMPLES=OFF", "-DLLAMA_BUILD_TOOLS=OFF", "-DLLAMA_BUILD_SERVER=OFF",
                   "-DLLAMA_CURL=OFF", "-DCMAKE_BUILD_WITH_INSTALL_RPATH=ON", "-DCMAKE_INSTALL_RPATH=$ORIGIN"]
        with source_build(level, "llama", options, target.parent / f"{target.name}.log", cache_dir) as build:
            out = Path(tempfile.mkdtemp(dir=target.parent))
            for lib in build.rglob("lib*.so*"):
                shutil.copy2(lib, out / lib.name, follow_symlinks=False)
            os.replace(out, target)
        return target


def installed_level(prefix: str | Path = sys.prefix) -> str:
    """The level of the llama-cpp-python the venv at `prefix` got from install (DEFAULT_LEVEL if
    it records none: installed by hand)."""
    marker = Path(prefix) / ".llama-build"
    name = marker.read_text().strip() if marker.is_file() else ""
    return next((level for level in LEVELS if name.startswith(f"{VERSION}-{level}-")), DEFAULT_LEVEL)


def wheel_libraries(wheel_path: Path, into: Path) -> list[Path]:
    """The shared libraries of a llama-cpp-python wheel, unpacked into `into` (for the static
    check of what an image carries: deploy/image.py, tests/test_llama_build.py)."""
    out = []
    with zipfile.ZipFile(wheel_path) as zf:
        for name in zf.namelist():
            if re.search(r"/lib/lib[^/]*\.so[.0-9]*$", name):
                out.append(Path(zf.extract(name, into)))
    return out


# An EVEX-encoded instruction (AVX-512, or AVX10) begins with the byte 0x62 after the prefixes that may
# stand before it (address size, segments); in 64-bit mode 0x62 is nothing else (BOUND is gone).
# AMX's tile instructions are VEX-encoded: found by their registers and names.
_EVEX = re.compile(r"^(?:(?:26|2e|36|3e|64|65|67) )*62 ")
_AMX = re.compile(r"%tmm\d|\b(?:ldtilecfg|sttilecfg|tilerelease|tilezero|tileloadd|tilestored|tdp\w+)\b")


def wide_instructions(library: Path) -> list[str]:
    """The AVX-512 and AMX instructions in a shared library's code (objdump's lines, at most 20):
    what a CPU of x86-64-v3 cannot run. Empty for a portable build; the image's libraries are
    checked with it (deploy/image.py)."""
    proc = subprocess.run(["objdump", "-d", "--insn-width=15", str(library)], capture_output=True, text=True,
                          check=True)
    found = []
    for line in proc.stdout.splitlines():
        parts = line.split("\t")  # "  addr:", raw bytes, mnemonic and operands
        if len(parts) >= 3 and (_EVEX.match(parts[1].strip() + " ") or _AMX.search(parts[2])):
            found.append(line.strip())
            if len(found) >= 20:
                break
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m shared.llama_build", description=__doc__.split("\n")[0])
    parser.add_argument("what", choices=["install", "wheel", "libs", "name"])
    parser.add_argument("--level", default=os.environ.get("LLAMA_BUILD") or DEFAULT_LEVEL, choices=list(LEVELS))
    parser.add_argument("--python", default=sys.executable, help="the venv's python (install)")
    args = parser.parse_args(argv)
    if args.what == "install":
        install(args.python, args.level)
    elif args.what == "wheel":
        print(wheel(args.level, python=args.python))
    elif args.what == "libs":
        print(libs(args.level))
    else:
        print(build_name(args.level))
    return 0


if __name__ == "__main__":
    sys.exit(main())
