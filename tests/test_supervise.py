"""`jevfleet serve`: the supervisord configuration it renders, and that the fleet goes away with
the process that started it (make does not forward SIGTERM)."""
from __future__ import annotations

import configparser
import os
import select
import signal
import subprocess
import sys

import pytest

from jevfleet.harness.fleet import Fleet
from jevfleet.harness.net import free_port
from jevfleet.supervise import render_supervisord_conf, serve
from shared.config import PROJECT_ROOT, default_settings
from tests.test_memory import header


def test_rendered_conf_runs_one_gateway_and_the_configured_workers(tmp_path):
    settings = default_settings(workers=3, run_dir=str(tmp_path))
    conf = configparser.RawConfigParser()
    conf.read_string(render_supervisord_conf(settings))
    worker = conf["program:worker"]
    assert worker["numprocs"] == "3"
    assert worker["process_name"] == "worker_%(process_num)02d"
    assert worker["autorestart"] == "unexpected" and worker["exitcodes"] == "0"
    assert int(worker["stopwaitsecs"]) > settings.deadline_s
    assert conf["program:gateway"]["command"].endswith("-m jevfleet gateway")
    assert conf["program:gateway"]["directory"] == str(PROJECT_ROOT) == worker["directory"]
    assert str(tmp_path) in conf["supervisord"]["logfile"]  # logs in the run dir, not the repo


@pytest.mark.parametrize("role, programs", [("all", {"gateway", "worker"}), ("gateway", {"gateway"}),
                                            ("workers", {"worker"})])
def test_each_role_runs_its_programs_under_the_same_rules(tmp_path, role, programs):
    settings = default_settings(role=role, workers=2, run_dir=str(tmp_path))
    conf = configparser.RawConfigParser()
    conf.read_string(render_supervisord_conf(settings))
    assert {s.removeprefix("program:") for s in conf.sections() if s.startswith("program:")} == programs
    for name in programs:
        assert conf[f"program:{name}"]["autorestart"] == "unexpected"
    assert "supervisorctl" in conf and str(tmp_path) in conf["supervisord"]["logfile"]


def test_a_workers_role_without_a_gateway_endpoint_is_refused(tmp_path, capsys):
    assert serve(default_settings(role="workers", run_dir=str(tmp_path))) == 2
    assert "--endpoint" in capsys.readouterr().err


def test_a_fleet_that_cannot_fit_in_memory_is_refused_with_the_figures(tmp_path, capsys):
    model = header(tmp_path / "llama.gguf", "llama", layers=16, embd=2048, heads=32, kv_heads=8)
    settings = default_settings(profile="gemma-3-270m", model=str(model), run_dir=str(tmp_path / "run"),
                                state_cache_ram_mb=1 << 30)  # a host-memory tier of 1 PiB per worker
    assert serve(settings) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("jevfleet serve: 1 worker(s) of llama.gguf need")
    assert "host-memory tier 1,073,741,824" in err and "MiB is available" in err
    assert not (tmp_path / "run").exists()  # nothing started


def wait_exit(pid: int, timeout: float) -> bool:
    """Block until process `pid` exits (pidfd becomes readable), or timeout."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        return bool(select.select([fd], [], [], timeout)[0])
    finally:
        os.close(fd)


@pytest.mark.fleet
def test_fleet_stops_when_the_process_that_started_it_is_terminated(tmp_path):
    port = free_port()
    serve = [sys.executable, "-m", "jevfleet", "serve", "--port", str(port), "--workers", "1",
             "--run-dir", str(tmp_path)]
    # A stand-in for make: a parent that starts serve and is then killed on its own.
    parent = subprocess.Popen([sys.executable, "-c", f"import subprocess; subprocess.run({serve!r})"],
                              cwd=PROJECT_ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    fleet = Fleet(port=port, run_dir=tmp_path, proc=parent)
    try:
        health = fleet.wait_for(lambda h: h.get("status") == "ready", "ready")
        supervisord = int((tmp_path / "supervisord.pid").read_text())
        worker = health["workers"][0]["pid"]
        parent.send_signal(signal.SIGTERM)
        parent.wait(10)
        assert wait_exit(supervisord, 60), "supervisord outlived its parent"
        assert wait_exit(worker, 5), "worker outlived supervisord"
    finally:
        if parent.poll() is None:
            parent.kill()
