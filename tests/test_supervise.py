"""`jevfleet serve`: the supervisord configuration it renders, that the fleet goes away with
the process that started it (make does not forward SIGTERM), and that a gateway or worker refused
at start stops it with the reason and exit 2 instead of being started again for ever."""
from __future__ import annotations

import configparser
import dataclasses
import json
import os
import select
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from client.net import free_port
from jevfleet.harness.engine import default_model
from jevfleet.harness.fleet import Fleet
from jevfleet.supervise import render_supervisord_conf, serve
from shared.config import PROJECT_ROOT, default_settings
from shared.model_files import file_sha256
from shared.profiles import load_profile
from shared.refusal import MARK, REFUSED
from tests.test_memory import header


def test_rendered_conf_runs_one_gateway_and_the_configured_workers(tmp_path):
    settings = default_settings(workers=3, run_dir=str(tmp_path))
    conf = configparser.RawConfigParser()
    conf.read_string(render_supervisord_conf(settings))
    worker = conf["program:worker"]
    assert worker["numprocs"] == "3"
    assert worker["process_name"] == "worker_%(process_num)02d"
    assert worker["autorestart"] == "unexpected" and worker["exitcodes"] == "0,2"  # 2: refused at start
    assert worker["startsecs"] == "0"  # up is the worker's own word, not a time: a refusal must reach EXITED
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
        assert (conf[f"program:{name}"]["exitcodes"], conf[f"program:{name}"]["startsecs"]) == ("0,2", "0")
    assert "supervisorctl" in conf and str(tmp_path) in conf["supervisord"]["logfile"]


@pytest.mark.parametrize("role", ["all", "gateway", "workers"])
def test_serve_hands_its_children_the_derived_profile_rendered_once(tmp_path, monkeypatch, role):
    """serve derives (here: a stand-in for deriving) and calibrates once, renders the profile into
    the cache dir and gives its gateway and workers the file's path as their `profile`: they load it
    and serve exactly it. A workers-only host does not calibrate (its workers never apply one)."""
    import jevfleet.supervise
    import quality.derived
    import shared.plan

    gguf_file = header(tmp_path / "mine.gguf", "llama", layers=2, embd=64, heads=4, kv_heads=4)
    derived = dataclasses.replace(load_profile("gemma-3-270m"), name="mine", path=str(gguf_file), package="",
                                  package_file="", source=gguf_file, derived=True)
    fitted = dataclasses.replace(derived, scale=0.5, bias=0.25, calibration_record=str(tmp_path / "record.json"))
    derivations = []
    monkeypatch.setattr(shared.plan, "serving_profile",
                        lambda s, **kwargs: derivations.append((s.profile, s.model)) or derived)
    if role == "workers":
        monkeypatch.setattr(quality.derived, "calibrated", lambda *_: pytest.fail("a workers-only host calibrated"))
    else:
        monkeypatch.setattr(quality.derived, "calibrated", lambda _settings, profile: fitted)
    handed = {}
    monkeypatch.setattr(jevfleet.supervise, "supervise", lambda conf, socket: handed.update(os.environ) or 0)
    monkeypatch.setattr(os, "environ", dict(os.environ))  # serve exports the children's settings here
    settings = default_settings(role=role, workers=1, model=str(gguf_file), cache_dir=str(tmp_path / "cache"),
                                run_dir=str(tmp_path / "run"), endpoint="ipc:///nonexistent/gateway.ipc")
    assert serve(settings) == 0 and derivations == [("", str(gguf_file))]
    path = Path(handed["JEV_PROFILE"])
    assert path.parent == tmp_path / "cache" / "profiles" and path.stem.startswith("mine-")
    assert load_profile(str(path)) == (derived if role == "workers" else fitted)
    assert handed["JEV_MODEL"] == str(gguf_file)  # the same file, so a child resolves the same model


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


def serve_until_it_exits(run_dir: Path, *flags: str) -> subprocess.CompletedProcess:
    """`jevfleet serve` with one worker, to its end: the deadline is the test's only wait."""
    cmd = [sys.executable, "-m", "jevfleet", "serve", "--port", str(free_port()), "--workers", "1",
           "--run-dir", str(run_dir), *flags]
    return subprocess.run(cmd, cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=120)


def spawned(run_dir: Path, process: str) -> int:
    """How many times supervisord started `process`: once means no restart loop."""
    return (run_dir / "supervisord.log").read_text().count(f"spawned: '{process}'")


@pytest.mark.fleet
@pytest.mark.parametrize("profile", [[], ["--profile", "gemma-3-270m"]], ids=["derived", "named profile"])
def test_a_model_file_that_is_not_a_gguf_is_refused_by_serve_itself(tmp_path, profile):
    bad = tmp_path / "model.gguf"
    bad.write_bytes(b"not a model at all" * 10)
    out = serve_until_it_exits(tmp_path / "run", *profile, "--model", str(bad))
    assert out.returncode == REFUSED and "not a GGUF file" in out.stderr, out.stdout + out.stderr
    assert "not a GGUF file" in out.stderr.strip().splitlines()[-1] and "Traceback" not in out.stderr  # one line
    assert not (tmp_path / "run" / "supervisord.log").exists()  # nothing was started


@pytest.fixture
def truncated(tmp_path) -> Path:
    """The default GGUF without its last MiB: its header reads (serve plans with it), its tensors
    do not load: a download cut short."""
    path = tmp_path / "truncated.gguf"
    shutil.copyfile(default_model()[1], path)
    os.truncate(path, path.stat().st_size - (1 << 20))
    return path


@pytest.mark.fleet
def test_a_model_that_does_not_load_stops_serve_with_the_reason_instead_of_restarts_for_ever(tmp_path, truncated):
    """serve reads only the header: the worker (and the gateway, vocabulary only) fail before they
    are up, and serve says why (the first one's reason at least) instead of supervisord restarting
    them for ever."""
    out = serve_until_it_exits(tmp_path / "run", "--profile", "gemma-3-270m", "--model", str(truncated))
    assert out.returncode == REFUSED, out.stdout + out.stderr
    said = [line for line in out.stderr.splitlines() if MARK in line]
    expected = {f"jevfleet serve: {p} {MARK}llama.cpp could not load {truncated}"
                for p in ("gateway", "worker:worker_00")}
    assert said and set(said) <= expected, out.stderr  # the first to fail stops serve; the other may not get to
    assert (spawned(tmp_path / "run", "worker_00"), spawned(tmp_path / "run", "gateway")) == (1, 1)


@pytest.mark.fleet
def test_a_start_up_canary_refusal_stops_serve_with_the_canarys_line(tmp_path):
    """A shape record saying a margin moved among batch mates on this CPU (worker/canary.py): the
    worker refuses deterministic mode after loading the model, and serve stops."""
    from worker.canary import shape_record  # loads llama.cpp's library

    profile, model = default_model()
    cache = tmp_path / "cache"
    record = shape_record(cache, file_sha256(model))
    record.parent.mkdir(parents=True)
    record.write_text(json.dumps({"differed": True}))
    out = serve_until_it_exits(tmp_path / "run", "--profile", profile.name, "--model", str(model),
                               "--cache-dir", str(cache))
    assert out.returncode == REFUSED, out.stdout + out.stderr
    (line,) = [line for line in out.stderr.splitlines() if MARK in line]
    assert line.startswith(f"jevfleet serve: worker:worker_00 {MARK}start-up canary: deterministic mode is not "
                           "deterministic here"), out.stderr
    assert spawned(tmp_path / "run", "worker_00") == 1


@pytest.mark.fleet
def test_a_workers_only_serve_stops_too_when_its_worker_cannot_start(tmp_path, truncated):
    out = serve_until_it_exits(tmp_path / "run", "--role", "workers", "--endpoint", f"ipc://{tmp_path}/none.ipc",
                               "--profile", "gemma-3-270m", "--model", str(truncated))
    assert out.returncode == REFUSED, out.stdout + out.stderr
    assert f"jevfleet serve: worker:worker_00 {MARK}llama.cpp could not load {truncated}" in out.stderr.splitlines()
    assert spawned(tmp_path / "run", "worker_00") == 1
