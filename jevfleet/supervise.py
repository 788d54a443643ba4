"""`jevfleet serve`: render the supervisord configuration for these settings and become
supervisord, so that Ctrl-C or SIGTERM to `make serve` stops every process it started."""
from __future__ import annotations

import ctypes
import os
import shutil
import signal
import sys
from string import Template

from shared.config import CONF_DIR, PROJECT_ROOT, Settings, replace
from shared.model_files import resolve_model
from shared.profiles import load_profile


def render_supervisord_conf(settings: Settings) -> str:
    template = Template((CONF_DIR / "supervisord.conf").read_text())
    return template.substitute(
        run_dir=settings.run_path,
        root=PROJECT_ROOT,  # children import this checkout's code, whatever the caller's cwd
        python=sys.executable,
        workers=settings.worker_count,
        stopwaitsecs=int(settings.deadline_s) + 5,  # long enough to drain the longest request
    )


PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """make does not forward SIGTERM to its children; ask the kernel to send it to us (and so to
    supervisord, which we become) when the process that started us dies."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):  # not Linux: Ctrl-C still reaches the whole process group
        pass


def serve(settings: Settings) -> int:
    settings = replace(settings, workers=settings.worker_count, run_dir=str(settings.run_path))
    run = settings.run_path
    run.mkdir(parents=True, exist_ok=True)
    # Assemble the model once here, not in N workers racing for the lock.
    model = resolve_model(load_profile(settings.profile), settings.cache_path, settings.model)
    conf = run / "supervisord.conf"
    conf.write_text(render_supervisord_conf(settings))
    os.environ.update(settings.to_env())
    print(f"jevfleet: http://{settings.host}:{settings.port}  workers={settings.workers}  model={model}\n"
          f"jevfleet: logs and supervisord socket in {run}  (supervisorctl -c {conf} status)", flush=True)
    supervisord = shutil.which("supervisord", path=os.path.dirname(sys.executable)) or "supervisord"
    _die_with_parent()
    os.execv(supervisord, [supervisord, "-n", "-c", str(conf)])
    return 1  # not reached
