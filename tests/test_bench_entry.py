"""bench/__main__.py, the one entry point of the benchmarks: every name it lists runs a module that
exists, a name it does not know is refused with the list, before anything starts, and a
record keeps the latest run of each model."""
from __future__ import annotations

import importlib.util

import pytest

import bench.__main__ as entry
from bench.__main__ import BENCHMARKS, main


@pytest.mark.parametrize("name", sorted(BENCHMARKS))
def test_every_listed_benchmark_names_a_module_that_exists(name):
    assert importlib.util.find_spec(BENCHMARKS[name][0]) is not None


def test_an_unknown_name_is_refused_with_the_list(capsys):
    assert main(["no-such-bench"]) == 2
    err = capsys.readouterr().err
    assert "no benchmark 'no-such-bench'" in err and all(name in err for name in BENCHMARKS)


def test_help_lists_them_all(capsys):
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert all(name in out for name in BENCHMARKS)


def test_a_record_keeps_each_models_latest_run(tmp_path, monkeypatch):
    monkeypatch.setattr(entry, "OUT", tmp_path)
    entry.keep("floor", "qwen2.5-coder-1.5b", "\nfirst run of the default\n")
    entry.keep("floor", "gemma-3-270m", "\ngemma's run\n")
    path = entry.keep("floor", "qwen2.5-coder-1.5b", "\nsecond run of the default\n")
    text = path.read_text()
    assert "gemma's run" in text and "second run of the default" in text and "first run" not in text
    assert text.startswith("# floor: ") and text.count("## model ") == 2


@pytest.mark.parametrize(("variable", "value", "short"), [("JEV_PROFILE", "qwen2.5-coder-1.5b", "qwen2.5-coder-1.5b"),
                                                         ("JEV_MODEL", "/models/mine.gguf", "mine")])
def test_a_sweep_keeps_its_rows_under_the_models_name(monkeypatch, variable, value, short):
    monkeypatch.delenv("JEV_PROFILE", raising=False)
    monkeypatch.setenv(variable, value)
    assert entry.served_model(short=True) == short
