"""One settings object for every process, read from TOML, then JEV_* env vars, then CLI flags.

Gateway, worker and supervisor all read the same file so that a flag given to `jevfleet serve`
reaches every process it starts (serve passes overrides on as JEV_* environment variables).
"""
from __future__ import annotations

import dataclasses
import os
import tomllib
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Mapping

PROJECT_ROOT = Path(__file__).resolve().parent.parent
CONF_DIR = PROJECT_ROOT / "conf"
DEFAULT_CONFIG = CONF_DIR / "jevfleet.toml"
ROLES = ("all", "gateway", "workers")  # what `jevfleet serve` runs on this host


@dataclass(frozen=True, kw_only=True)
class Settings:
    host: str = "127.0.0.1"
    port: int = 8017
    max_body_bytes: int = 4 * 1024 * 1024
    deadline_s: float = 30.0
    tokenizer_threads: int = 2
    role: str = "all"
    workers: int = 0
    cores_per_worker: int = 2
    endpoint: str = ""
    heartbeat_s: float = 0.5
    dead_after_s: float = 2.0
    queue_tokens: int = 4096
    queue_requests: int = 32
    affinity_slack_tokens: int = 384
    affinity_memory: int = 16
    curve_key: str = ""
    curve_server_key: str = ""
    curve_clients: str = ""
    run_dir: str = ""
    profile: str = "gemma-3-270m"
    model: str = ""
    ctx: int = 8192
    batch_tokens: int = 384
    threads: int = 0
    mode: str = "deterministic"
    state_cache: int = 16
    state_cache_tokens: int = 8192
    warmup: int = 1
    cache_dir: str = ""

    @property
    def worker_count(self) -> int:
        if self.workers > 0:
            return self.workers
        return max(1, (os.cpu_count() or 1) // max(1, self.cores_per_worker))

    @property
    def run_path(self) -> Path:
        """A workers-only host's own directory by default, so it never takes a gateway's on the same host."""
        return Path(self.run_dir or f"/tmp/jevfleet-{self.port}" + ("-workers" if self.role == "workers" else ""))

    @property
    def zmq_endpoint(self) -> str:
        return self.endpoint or f"ipc://{self.run_path / 'workers.ipc'}"

    @property
    def cache_path(self) -> Path:
        return Path(self.cache_dir or Path.home() / ".cache" / "jevfleet")

    def to_env(self) -> dict[str, str]:
        """The settings as JEV_* variables, so child processes see exactly these values."""
        return {f"JEV_{f.name.upper()}": str(getattr(self, f.name)) for f in fields(self)}


def _coerce(name: str, raw: Any) -> Any:
    kind = {f.name: f.type for f in fields(Settings)}[name]
    try:
        if kind == "int":
            return int(raw)
        if kind == "float":
            return float(raw)
        return str(raw)
    except ValueError as exc:
        raise ValueError(f"setting {name}: cannot read {raw!r} as {kind}") from exc


def load_settings(
    overrides: Mapping[str, Any] | None = None,
    *,
    config_file: str | os.PathLike[str] | None = None,
    environ: Mapping[str, str] | None = None,
) -> Settings:
    """TOML file < JEV_* environment < explicit overrides (CLI flags; None values are ignored)."""
    env = os.environ if environ is None else environ
    path = Path(config_file or env.get("JEV_CONFIG") or DEFAULT_CONFIG)
    with path.open("rb") as fh:
        values: dict[str, Any] = tomllib.load(fh)
    known = {f.name for f in fields(Settings)}
    unknown = set(values) - known
    if unknown:
        raise ValueError(f"{path}: unknown settings {sorted(unknown)}")
    for name in known:
        if f"JEV_{name.upper()}" in env:
            values[name] = env[f"JEV_{name.upper()}"]
    for name, value in (overrides or {}).items():
        if value is not None:
            values[name] = value
    settings = Settings(**{k: _coerce(k, v) for k, v in values.items()})
    if settings.mode not in ("deterministic", "fast"):
        raise ValueError(f"mode must be 'deterministic' or 'fast', not {settings.mode!r}")
    if settings.role not in ROLES:
        raise ValueError(f"role must be one of {', '.join(ROLES)}, not {settings.role!r}")
    if not 0 <= settings.state_cache <= 192:  # llama.cpp holds 256 sequences, 64 are working ones
        raise ValueError(f"state_cache must be 0..192, not {settings.state_cache}")
    if settings.state_cache_tokens < 0:
        raise ValueError(f"state_cache_tokens must be >= 0, not {settings.state_cache_tokens}")
    return settings


def replace(settings: Settings, **changes: Any) -> Settings:
    return dataclasses.replace(settings, **changes)
