"""`make image`: build jevfleet's OCI image (deploy/Containerfile) with podman, from Debian packages
and PyPI only, so it builds where no container registry can be reached.

Three steps, each skipped when its inputs have not changed:

1. The base. `--base` names any Debian-like image with Python 3.11 (python:3.11-slim where a
   registry is reachable). The default, localhost/jevfleet-base:bookworm, is made here when missing:
   a Debian 12 root file system from mmdebstrap (BASE_PACKAGES), imported.
2. The wheelhouse, build/image/wheels: every package the project needs, as wheels, taken by this
   checkout's own pip, llama-cpp-python's from the portable build kept in the cache dir
   (shared/llama_build.py: x86-64-v3, the one .venv has), never compiled again (it is
   py3-none-linux_x86_64: ctypes, not tied to one Python). Its libraries are checked to hold no
   AVX-512 or AMX instruction, so the image runs on every x86-64-v3 node and computes there the
   bits it computes here. Redone when pyproject.toml or the build changes. The wheels must suit the
   image's Python: this checks that the host's Python has the same major.minor version as the image's.
3. podman build, with a digest of the wheels and of the model-baking code as a build argument, so
   podman's layer cache rebuilds the heavy layer exactly when they change.

podman runs with deploy/podman/containers.conf unless CONTAINERS_CONF names another file.
"""
from __future__ import annotations

import argparse
import contextlib
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Iterator

from shared import llama_build
from shared.config import PROJECT_ROOT

IMAGE = "localhost/jevfleet:local"
BASE_PACKAGES = ("python3", "python3-venv", "tini", "libgomp1", "haproxy")
# Named after its package list, so that a changed list makes a new base.
LOCAL_BASE = "localhost/jevfleet-base:bookworm-" + hashlib.sha256(" ".join(BASE_PACKAGES).encode()).hexdigest()[:12]
CONTAINERFILE = PROJECT_ROOT / "deploy" / "Containerfile"
CONTAINERS_CONF = PROJECT_ROOT / "deploy" / "podman" / "containers.conf"
BUILD_DIR = PROJECT_ROOT / "build" / "image"
WHEELS = BUILD_DIR / "wheels"
# What the heavy layer is made from besides the wheels (see the Containerfile's INPUTS).
BAKE_INPUTS = ("deploy/bake_model.py", "shared/model_files.py")
IMAGE_PYTHON = "3.11"


class ImageError(RuntimeError):
    """A step of the build failed; the message says which and why."""


def podman_env() -> dict[str, str]:
    """The environment podman runs in: the project's containers.conf unless the caller chose one
    (and the image store CONTAINERS_STORAGE_CONF names, when set: see empty_store)."""
    return {**os.environ, "CONTAINERS_CONF": os.environ.get("CONTAINERS_CONF") or str(CONTAINERS_CONF)}


@contextlib.contextmanager
def empty_store(directory: Path) -> Iterator[Path]:
    """podman with an image store of its own in `directory`, empty at first, for as long as the
    context lasts; removed with everything in it at the end. Nothing cached from an earlier build
    (a base image, a layer made by older code) can then stand in for a step of this build, which
    is how a broken install path once hid behind the developers' stores (issue 40)."""
    directory.mkdir(parents=True, exist_ok=True)
    conf = directory / "storage.conf"
    conf.write_text(f'[storage]\ndriver = "overlay"\ngraphroot = "{directory / "graph"}"\n'
                    f'runroot = "{directory / "run"}"\n')
    before = os.environ.get("CONTAINERS_STORAGE_CONF")
    os.environ["CONTAINERS_STORAGE_CONF"] = str(conf)
    try:
        yield directory
    finally:
        podman("rm", "--all", "--force", check=False, quiet=True)
        podman("rmi", "--all", "--force", check=False, quiet=True)
        if before is None:
            os.environ.pop("CONTAINERS_STORAGE_CONF", None)
        else:
            os.environ["CONTAINERS_STORAGE_CONF"] = before
        shutil.rmtree(directory, ignore_errors=True)


def podman(*args: str, check: bool = True, timeout: float = 1800, quiet: bool = False) -> subprocess.CompletedProcess:
    """podman ARGS with the project's configuration; output captured when quiet."""
    proc = subprocess.run(["podman", *args], env=podman_env(), timeout=timeout, text=True,
                          capture_output=quiet)
    if check and proc.returncode != 0:
        detail = f": {proc.stderr.strip()[-2000:]}" if quiet else ""
        raise ImageError(f"podman {' '.join(args[:3])} ... failed (exit {proc.returncode}){detail}")
    return proc


def image_exists(name: str) -> bool:
    return podman("image", "exists", name, check=False, quiet=True).returncode == 0


def build_base(name: str = LOCAL_BASE) -> None:
    """A Debian 12 root file system (mmdebstrap, minbase, no documentation) imported as `name`."""
    if shutil.which("mmdebstrap") is None:
        raise ImageError("mmdebstrap is not installed (make test-tools installs it as root)")
    with tempfile.TemporaryDirectory(prefix="jevfleet-base-") as tmp:
        tar = Path(tmp) / "rootfs.tar"
        cmd = ["mmdebstrap", "--variant=minbase", "--include=" + ",".join(BASE_PACKAGES),
               "--dpkgopt=path-exclude=/usr/share/doc/*", "--dpkgopt=path-exclude=/usr/share/man/*",
               "--dpkgopt=path-exclude=/usr/share/locale/*", "--format=tar", "bookworm", str(tar)]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
        if proc.returncode != 0:
            raise ImageError(f"mmdebstrap failed (exit {proc.returncode}): {proc.stderr.strip()[-2000:]}")
        podman("import", "--change", "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
               "--change", 'CMD ["/bin/bash"]', str(tar), name, quiet=True)


def _digest(paths: list[Path]) -> str:
    h = hashlib.sha256()
    for path in paths:
        h.update(path.name.encode() + b"\0" + path.read_bytes())
    return h.hexdigest()


def build_wheels(python: str = sys.executable) -> Path:
    """build/image/wheels, llama-cpp-python's the portable one; kept while pyproject.toml and the
    build are unchanged (a stamp)."""
    stamp = BUILD_DIR / "wheels.stamp"
    llama_wheel = llama_build.wheel(llama_build.DEFAULT_LEVEL, python=python)
    key = _digest([PROJECT_ROOT / "pyproject.toml"]) + llama_wheel.parent.name
    if stamp.is_file() and stamp.read_text() == key and any(WHEELS.glob("*.whl")):
        return WHEELS
    version = subprocess.run([python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    if version != IMAGE_PYTHON:
        raise ImageError(f"the wheelhouse is made by {python} (Python {version}); the image runs Python "
                         f"{IMAGE_PYTHON}, whose compiled packages differ: run with a {IMAGE_PYTHON} Python")
    shutil.rmtree(WHEELS, ignore_errors=True)
    WHEELS.mkdir(parents=True)
    proc = subprocess.run([python, "-m", "pip", "wheel", "--quiet", "--progress-bar", "off", "--find-links",
                           str(llama_wheel.parent), "--only-binary", "llama-cpp-python", "--wheel-dir", str(WHEELS),
                           str(PROJECT_ROOT)], capture_output=True, text=True, timeout=3600)
    if proc.returncode != 0:
        raise ImageError(f"pip wheel failed (exit {proc.returncode}): {proc.stderr.strip()[-2000:]}")
    for own in WHEELS.glob("jevfleet-*.whl"):  # the code goes into the image as files, not as a wheel
        own.unlink()
    check_portable(next(WHEELS.glob("llama_cpp_python-*.whl")))
    stamp.write_text(key)
    return WHEELS


def check_portable(wheel: Path) -> None:
    """ImageError unless every shared library of the llama-cpp-python wheel is free of AVX-512
    and AMX instructions (shared/llama_build.wide_instructions): an image built on an AVX-512 host
    must not stop with an illegal instruction on an AVX2 node."""
    with tempfile.TemporaryDirectory() as tmp:
        libraries = llama_build.wheel_libraries(wheel, Path(tmp))
        if not libraries:
            raise ImageError(f"{wheel.name} holds no llama.cpp library")
        for library in libraries:
            if found := llama_build.wide_instructions(library):
                raise ImageError(f"{wheel.name}: {library.name} holds AVX-512/AMX instructions, which an "
                                 f"x86-64-v3 node cannot run (first: {found[0]}); build it with LLAMA_BUILD=x86-64-v3")


def inputs_digest() -> str:
    """What the Containerfile's heavy layer is made of: the wheels and the model-baking code."""
    return _digest(sorted(WHEELS.glob("*.whl")) + [PROJECT_ROOT / p for p in BAKE_INPUTS])


def build_image(tag: str = IMAGE, base: str = LOCAL_BASE, log: Path | None = None) -> dict[str, float]:
    """Build (or find in podman's cache) the image; the seconds each step took."""
    if shutil.which("podman") is None:
        raise ImageError("podman is not installed (make test-tools installs it as root)")
    seconds: dict[str, float] = {}
    start = time.monotonic()
    if base == LOCAL_BASE and not image_exists(base):
        build_base(base)
    seconds["base"] = time.monotonic() - start
    start = time.monotonic()
    build_wheels()
    seconds["wheels"] = time.monotonic() - start
    start = time.monotonic()
    out = open(log, "w") if log else None
    try:
        proc = subprocess.run(["podman", "build", "--layers", "--file", str(CONTAINERFILE), "--build-arg",
                               f"BASE={base}", "--build-arg", f"INPUTS={inputs_digest()}", "--tag", tag,
                               str(PROJECT_ROOT)], env=podman_env(), stdout=out, stderr=subprocess.STDOUT,
                              timeout=3600)
    finally:
        if out:
            out.close()
    if proc.returncode != 0:
        where = f"; see {log}" if log else ""
        raise ImageError(f"podman build failed (exit {proc.returncode}){where}")
    seconds["build"] = time.monotonic() - start
    return seconds


def image_size_mb(tag: str = IMAGE) -> float:
    out = podman("image", "inspect", "--format", "{{.Size}}", tag, quiet=True).stdout
    return int(out.strip()) / 1e6


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m deploy.image", description=__doc__.splitlines()[0])
    parser.add_argument("--tag", default=IMAGE, help=f"image name (default {IMAGE})")
    parser.add_argument("--base", default=LOCAL_BASE,
                        help=f"base image (default {LOCAL_BASE}, made here; or e.g. docker.io/library/python:3.11-slim)")
    args = parser.parse_args(argv)
    try:
        seconds = build_image(args.tag, args.base)
    except ImageError as exc:
        print(f"make image: {exc}", file=sys.stderr)
        return 1
    steps = ", ".join(f"{name} {s:.1f} s" for name, s in seconds.items())
    print(f"{args.tag}: {image_size_mb(args.tag):.0f} MB ({steps})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
