"""The settings model (shared/config.py) is the one source: the TOML file, the table in
docs/configuration.md and the CLI's flags agree with it; env beats the file, a flag beats env; bad values are refused
with the setting named."""
from __future__ import annotations

import os
import re
import tomllib

import pytest

from jevfleet.cli import main
from shared.config import (CONFIG_ENV, DEFAULT_CONFIG, PROJECT_ROOT, Settings, SettingsError, default_settings,
                           default_text, env_var, load_settings, replace)
from shared.llama import MAX_STATE_CACHE
from worker.cores import derive_cores

DEFAULTS = {name: field.default for name, field in Settings.model_fields.items()}
TABLE_ROW = re.compile(r"^\| `(\w+)` \| `(.+?)` \| (.+) \|$")


@pytest.fixture(autouse=True)
def no_jev_environment(monkeypatch):
    """Start from the file alone: the tiers set JEV_MODEL, a developer may have more."""
    for name in list(os.environ):
        if name.startswith("JEV_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv(CONFIG_ENV, str(DEFAULT_CONFIG))  # restored after the test, whatever --config did


def write_config(tmp_path, monkeypatch, text: str) -> None:
    path = tmp_path / "jevfleet.toml"
    path.write_text(text)
    monkeypatch.setenv(CONFIG_ENV, str(path))


def test_the_toml_file_lists_exactly_the_models_settings_with_their_defaults():
    with DEFAULT_CONFIG.open("rb") as fh:
        in_file = tomllib.load(fh)
    assert list(in_file) == list(DEFAULTS)  # same names, same order as the model (and docs/configuration.md)
    for name, value in in_file.items():
        assert (value, type(value)) == (DEFAULTS[name], type(DEFAULTS[name])), name


def test_the_docs_table_lists_exactly_the_models_settings_defaults_and_descriptions():
    section = (PROJECT_ROOT / "docs" / "configuration.md").read_text()
    rows = [TABLE_ROW.match(line) for line in section.splitlines() if line.startswith("| `")]
    assert all(rows), "every row of the settings table: | `name` | `default as in TOML` | description |"
    in_docs = {m[1]: (tomllib.loads(f"v = {m[2]}")["v"], m[3]) for m in rows}
    assert list(in_docs) == list(DEFAULTS)
    for name, field in Settings.model_fields.items():
        assert in_docs[name] == (field.default, field.description), name


def test_every_setting_is_a_flag_with_its_description_default_and_environment_variable(capsys):
    with pytest.raises(SystemExit):
        main(["serve", "--help"])
    words = " ".join(capsys.readouterr().out.split())  # as argparse wrapped it, unwrapped
    for name, field in Settings.model_fields.items():
        flag = "--" + name.replace("_", "-")
        described = f"{field.description}; default {default_text(name)} [env {env_var(name)}]"
        assert re.search(rf"{flag} \S+ {re.escape(' '.join(described.split()))}", words), name


def test_the_file_gives_the_defaults():
    assert load_settings() == default_settings()


def test_env_beats_the_file_and_a_flag_beats_env(tmp_path, monkeypatch):
    write_config(tmp_path, monkeypatch, "port = 9000\nworkers = 5\n")
    assert (load_settings().port, load_settings().workers) == (9000, 5)
    monkeypatch.setenv("JEV_PORT", "9001")
    assert (load_settings().port, load_settings().workers) == (9001, 5)
    assert load_settings({"port": 9002, "workers": None}).port == 9002  # None: a flag not given


def test_the_cli_reads_config_flag_env_in_that_order(tmp_path, monkeypatch):
    seen = []
    monkeypatch.setattr("jevfleet.haproxy.render_haproxy_conf", lambda settings, *a, **k: seen.append(settings) or "")
    write_config(tmp_path, monkeypatch, "deadline_s = 5.0\nport = 9000\n")
    monkeypatch.setenv("JEV_PORT", "9001")
    assert main(["haproxy-conf", "--batch-tokens", "100", "a:1"]) == 0
    assert (seen[-1].deadline_s, seen[-1].port, seen[-1].batch_tokens) == (5.0, 9001, 100)
    assert main(["haproxy-conf", "--port", "9002", "a:1"]) == 0
    assert seen[-1].port == 9002
    other = tmp_path / "other.toml"
    other.write_text("deadline_s = 7.0\n")
    assert main(["haproxy-conf", "--config", str(other), "a:1"]) == 0
    assert (seen[-1].deadline_s, seen[-1].port) == (7.0, 9001)
    assert os.environ[CONFIG_ENV] == str(other)  # what the processes `serve` starts will read


def test_settings_survive_the_trip_through_a_childs_environment(monkeypatch):
    s = load_settings({"port": 9100, "batch_tokens": 200, "deadline_s": 2.5, "mode": "fast"})
    for name, value in s.to_env().items():
        monkeypatch.setenv(name, value)
    assert load_settings() == s


@pytest.mark.parametrize("name, value, said", [
    ("state_cache", MAX_STATE_CACHE + 1, f"less than or equal to {MAX_STATE_CACHE}"),
    ("state_cache", -1, "greater than or equal to 0"),
    ("cores_per_worker", 0, "greater than or equal to 1"),
    ("port", 70000, "less than or equal to 65535"),
    ("deadline_s", 0, "greater than 0"),
    ("mode", "turbo", "'deterministic' or 'fast'"),
    ("role", "router", "'all', 'gateway' or 'workers'"),
])
def test_values_out_of_bounds_are_refused_naming_the_setting(name, value, said):
    with pytest.raises(SettingsError, match=rf"setting {name} = {re.escape(repr(value))}: .*{re.escape(said)}"):
        load_settings({name: value})


def test_a_bound_is_a_bound_not_one_less():
    assert load_settings({"state_cache": MAX_STATE_CACHE}).state_cache == MAX_STATE_CACHE == 192


def test_a_bad_environment_value_names_the_setting_and_its_variable(monkeypatch):
    monkeypatch.setenv("JEV_PORT", "eighty")
    with pytest.raises(SettingsError, match=r"setting port = 'eighty': .*valid integer.*JEV_PORT"):
        load_settings()


def test_the_cli_says_what_is_wrong_and_exits_2_without_a_traceback(capsys, monkeypatch):
    monkeypatch.setenv("JEV_STATE_CACHE", "500")
    assert main(["haproxy-conf", "a:1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("jevfleet haproxy-conf: setting state_cache = '500'") and "Traceback" not in err


def test_unknown_keys_in_the_file_are_refused(tmp_path, monkeypatch):
    write_config(tmp_path, monkeypatch, "prot = 1\n")
    with pytest.raises(SettingsError, match="unknown setting 'prot'"):
        load_settings()


def test_a_missing_config_file_is_an_error_not_the_defaults(tmp_path, monkeypatch):
    monkeypatch.setenv(CONFIG_ENV, str(tmp_path / "typo.toml"))
    with pytest.raises(SettingsError, match="typo.toml does not exist"):
        load_settings()


def test_replace_checks_the_new_values_and_reads_neither_file_nor_env(monkeypatch):
    s = load_settings()
    monkeypatch.setenv("JEV_PORT", "9001")
    assert replace(s, ctx=1024).port == s.port and default_settings().port == DEFAULTS["port"]
    with pytest.raises(SettingsError, match="setting ctx = 0"):
        replace(s, ctx=0)
    with pytest.raises(Exception, match="frozen"):
        s.port = 1


@pytest.mark.parametrize("mask, per_worker, expected", [(range(8), 2, 4), (range(8), 3, 2), ({0, 5}, 2, 1),
                                                        ({3}, 2, 1), ({2, 3, 4}, 1, 3)])
def test_the_worker_count_follows_the_affinity_mask_as_pinning_does(monkeypatch, mask, per_worker, expected):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(mask))
    count = default_settings(cores_per_worker=per_worker).worker_count
    assert count == expected
    sets = {tuple(derive_cores(k, per_worker)) for k in range(count)}  # worker/cores.py's pinning
    assert len(sets) == count and set().union(*sets) <= set(mask)
    assert default_settings(workers=7, cores_per_worker=per_worker).worker_count == 7


def test_a_workers_role_keeps_its_own_run_dir_next_to_a_gateway():
    gateway = load_settings({"role": "gateway", "port": 8017})
    workers = load_settings({"role": "workers", "port": 8017})
    assert gateway.run_path != workers.run_path
