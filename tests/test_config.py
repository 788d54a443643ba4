import pytest

from shared.config import Settings, load_settings


def test_defaults_come_from_the_toml_file():
    s = load_settings(environ={})
    assert (s.host, s.port, s.batch_tokens, s.mode) == ("127.0.0.1", 8017, 384, "deterministic")


def test_env_beats_file_and_flags_beat_env():
    s = load_settings(environ={"JEV_PORT": "9001", "JEV_WORKERS": "3"})
    assert (s.port, s.workers) == (9001, 3)
    s = load_settings({"port": 9002, "workers": None}, environ={"JEV_PORT": "9001", "JEV_WORKERS": "3"})
    assert (s.port, s.workers) == (9002, 3)


def test_settings_survive_the_trip_through_child_environment():
    s = load_settings({"port": 9100, "batch_tokens": 200, "deadline_s": 2.5}, environ={})
    assert load_settings(environ=s.to_env()) == s


def test_bad_values_are_refused_with_the_setting_named():
    with pytest.raises(ValueError, match="port"):
        load_settings(environ={"JEV_PORT": "eighty"})
    with pytest.raises(ValueError, match="mode"):
        load_settings({"mode": "turbo"}, environ={})
    with pytest.raises(ValueError, match="role"):
        load_settings({"role": "router"}, environ={})


def test_unknown_keys_in_the_file_are_refused(tmp_path):
    bad = tmp_path / "c.toml"
    bad.write_text("prot = 1\n")
    with pytest.raises(ValueError, match="prot"):
        load_settings(config_file=bad, environ={})


def test_default_worker_count_is_one_per_two_cores(monkeypatch):
    monkeypatch.setattr("os.cpu_count", lambda: 8)
    assert Settings(workers=0, cores_per_worker=2).worker_count == 4
    monkeypatch.setattr("os.cpu_count", lambda: 1)
    assert Settings(workers=0).worker_count == 1


def test_a_workers_role_keeps_its_own_run_dir_next_to_a_gateway():
    gateway = load_settings({"role": "gateway", "port": 8017}, environ={})
    workers = load_settings({"role": "workers", "port": 8017}, environ={})
    assert gateway.run_path != workers.run_path
