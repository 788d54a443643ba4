"""bench/__main__.py, the one entry point of the benchmarks: every name it lists runs a module that
exists, and a name it does not know is refused with the list, before anything starts."""
from __future__ import annotations

import importlib.util

import pytest

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
