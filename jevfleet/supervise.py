"""`jevfleet serve`: render the supervisord configuration for these settings, run supervisord
and watch it, so that Ctrl-C or SIGTERM to `make serve` stops every process it started, and a
program that refuses at start stops them all.

The role says which of the template's programs this host runs: all of them (one host), only
the gateway (its workers run on other hosts), or only the workers (they connect to `endpoint`,
a gateway elsewhere). Every role is the same supervisord, with the same restart and stop rules.

serve stays supervisord's parent: it forwards SIGTERM and SIGINT to it, and exits with its exit
status; but when a gateway or worker refuses at start (it failed before it was up: exit 2,
jevfleet/watch.py) serve prints that process's one-line reason, stops supervisord and exits 2.
Starting it again would fail again, and a fleet that says "starting" for ever with no reason
helps nobody. A process that was up and then dies is restarted by supervisord as before.

A profile derived from a GGUF is derived (and calibrated) here once and handed to the children as
a rendered file (hand_over), never derived again by each of them."""
from __future__ import annotations

import ctypes
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from string import Template

from jevfleet.watch import watch
from shared.config import CONF_DIR, PROJECT_ROOT, Settings, replace
from shared.derive import render_profile
from shared.memory import MemoryRefusal, plan_workers
from shared.plan import serving_plan
from shared.profiles import Profile
from shared.refusal import MARK, REFUSED
from shared.start_guard import clear_all

PROGRAMS = {"all": ("gateway", "worker"), "gateway": ("gateway",), "workers": ("worker",)}
PROGRAM_SECTION = re.compile(r"^\[program:(\w+)\]\n(?:(?!\[).*\n?)*", re.MULTILINE)


def render_supervisord_conf(settings: Settings) -> str:
    """The template filled in from the settings, keeping the [program:...] sections of the role."""
    template = Template((CONF_DIR / "supervisord.conf").read_text())
    text = template.substitute(
        run_dir=settings.run_path,
        root=PROJECT_ROOT,  # children import this checkout's code, whatever the caller's cwd
        python=sys.executable,
        workers=settings.worker_count,
        stopwaitsecs=int(settings.deadline_s) + 5,  # long enough to drain the longest request
    )
    keep = PROGRAMS[settings.role]
    return PROGRAM_SECTION.sub(lambda m: m.group(0) if m.group(1) in keep else "", text).rstrip() + "\n"


PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """make does not forward SIGTERM to its children; ask the kernel to send it to this process
    when the process that started it dies: serve (which forwards it) and its supervisord."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):  # not Linux: Ctrl-C still reaches the whole process group
        pass


def hand_over(settings: Settings, derived: Profile) -> Settings:
    """The children's settings for a `derived` profile: calibrated here once (fitted first if none
    is recorded, before a gateway reads it; not on a workers-only host, whose workers never apply
    a calibration), rendered into the cache dir, and its path their `profile` setting. They load
    that file instead of each deriving from the GGUF again: one derivation, a faster start, and a
    gateway and workers that cannot disagree on it."""
    if settings.role != "workers":
        from quality.derived import calibrated

        derived = calibrated(settings, derived)
        print(f"jevfleet: the profile derived from {derived.source.name}, calibration scale = {derived.scale:.4f}, "
              f"bias = {derived.bias:.4f} ({derived.calibration_record or 'none recorded'})", flush=True)
    path = render_profile(derived, settings.cache_path)
    print(f"jevfleet: serving it as {path}", flush=True)
    return replace(settings, profile=str(path))


def serve(settings: Settings) -> int:
    if settings.role == "workers" and not settings.endpoint:
        print("jevfleet serve: --role workers needs --endpoint, the gateway's (e.g. tcp://GATEWAY:5555)",
              file=sys.stderr)
        return 2
    try:  # the model assembled once here, not in N workers racing for the lock; ctx within the file's
        # reach (before memory is planned and children read it); as many workers as cores and memory
        # allow, or those asked for if they fit
        plan = serving_plan(settings)
        settings, profile, model = plan.settings, plan.profile, plan.model
        workers = plan_workers(settings, plan.shape, model.name) if settings.role != "gateway" else settings.worker_count
    except MemoryRefusal as exc:
        print(f"jevfleet serve: {exc}", file=sys.stderr)
        return 2
    settings = replace(settings, workers=workers, run_dir=str(settings.run_path))
    run = settings.run_path
    run.mkdir(parents=True, exist_ok=True)
    clear_all(run)  # a new fleet: no crash counted yet (shared/start_guard.py)
    if profile.derived:
        settings = hand_over(settings, profile)
    conf = run / "supervisord.conf"
    conf.write_text(render_supervisord_conf(settings))
    os.environ.update(settings.to_env())
    serving = {"all": f"http://{settings.host}:{settings.port}  workers={settings.workers}",
               "gateway": f"gateway only: http://{settings.host}:{settings.port}, workers connect to "
                          f"{settings.zmq_endpoint}",
               "workers": f"workers only: {settings.workers} connecting to {settings.zmq_endpoint}"}[settings.role]
    print(f"jevfleet: {serving}  model={model}\n"
          f"jevfleet: logs and supervisord socket in {run}  (supervisorctl -c {conf} status)", flush=True)
    return supervise(conf, run / "supervisor.sock")


def supervise(conf: Path, socket: Path) -> int:
    """Run supervisord on `conf` until it exits (its exit status), or until a program refuses at
    start (REFUSED, after stopping supervisord)."""
    supervisord = shutil.which("supervisord", path=os.path.dirname(sys.executable)) or "supervisord"
    _die_with_parent()
    child = subprocess.Popen([supervisord, "-n", "-c", str(conf)], preexec_fn=_die_with_parent)
    for signum in (signal.SIGTERM, signal.SIGINT):  # Ctrl-C reaches both; supervisord stops once
        signal.signal(signum, lambda number, _: child.poll() is None and child.send_signal(number))
    found = watch(child, socket)
    if not found:
        return child.returncode
    for refusal in found:
        print(f"jevfleet serve: {refusal.process} {MARK}{refusal.reason}", file=sys.stderr, flush=True)
    print("jevfleet serve: stopping the fleet; starting it again would fail again", file=sys.stderr, flush=True)
    child.terminate()
    child.wait()
    return REFUSED
