"""The settings of every process: one typed model, read from a TOML file, then JEV_* environment
variables, then flags.

Invariant: each setting is declared once, in Settings below, with its type, default, bounds and
description. conf/jevfleet.toml and the table in docs/configuration.md repeat the names and defaults for readers
(tests/test_config.py checks that they agree), `jevfleet --help` is generated from the model
(jevfleet/cli.py), and the classes that use a setting take it as a required argument instead of
keeping a default of their own.

Gateway, worker and supervisor all read the same model, so a flag given to `jevfleet serve`
reaches every process it starts (serve passes its settings on as JEV_* environment variables).
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Callable, Literal, Mapping

from pydantic import Field, ValidationError
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict, TomlConfigSettingsSource

from shared.llama import MAX_STATE_CACHE

PROJECT_ROOT = Path(__file__).resolve().parent.parent
CONF_DIR = PROJECT_ROOT / "conf"
DEFAULT_CONFIG = CONF_DIR / "jevfleet.toml"
ENV_PREFIX = "JEV_"
CONFIG_ENV = "JEV_CONFIG"  # names the TOML file; `--config` sets it, so children read the same one


class SettingsError(ValueError):
    """A setting that cannot be used, said in one line that names it (the CLI prints it, exit 2)."""


class Settings(BaseSettings):
    """Every setting of jevfleet. Frozen: one process's settings do not change once read."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, frozen=True, extra="forbid")

    # --- gateway (HTTP) ---
    host: str = Field("127.0.0.1", description="address the HTTP gateway listens on")
    port: int = Field(8017, ge=1, le=65535, description="HTTP port of the gateway")
    max_body_bytes: int = Field(4 * 1024 * 1024, ge=1,
                                description="request body limit after decompression, bytes (413 above it)")
    body_bytes_in_flight: int = Field(64 * 1024 * 1024, ge=1, description="bytes of request bodies the gateway "
                                      "holds at once while they arrive and until answered, all connections "
                                      "together (each counts its Content-Length, or the most a body may be); a new "
                                      "upload past it gets 503 with Retry-After before its body is read; bodies "
                                      "over 64 KiB may hold three quarters of it, the rest is kept for small ones")
    deadline_s: float = Field(30.0, gt=0, description="seconds a request may stay queued before it gets 503 "
                                                      "(one already being read finishes)")
    header_timeout_s: float = Field(20.0, gt=0, description="seconds a connection may take to send a request's "
                                    "line and headers, from when it opened or got its last answer (so also how "
                                    "long an idle kept-alive connection stays open); then it is closed")
    body_timeout_s: float = Field(30.0, gt=0, description="seconds a request's body may take to arrive once its "
                                  "headers are in; then 408 (until then it holds no place in a queue)")
    tokenizer_threads: int = Field(2, ge=1, description="gateway threads that tokenize requests")
    # --- fleet ---
    role: Literal["all", "gateway", "workers"] = Field(
        "all", description="what jevfleet serve runs on this host: all (gateway and workers), gateway "
                           "(workers elsewhere) or workers (connecting to endpoint)")
    workers: int = Field(0, ge=0, description="worker processes; 0 = one per cores_per_worker cores of this "
                                              "process's CPU affinity mask, at least 1, as many of those as "
                                              "fit in memory")
    cores_per_worker: int = Field(2, ge=1, description="cores each worker is pinned to; also its llama.cpp "
                                                       "threads unless threads is set")
    pin_workers: int = Field(1, ge=0, le=1, description="1 = pin worker k to cores [k*n, (k+1)*n) of the CPUs "
                             "this process may run on (n = cores_per_worker); 0 = no pinning, each worker runs "
                             "on all of them with cores_per_worker threads (Kubernetes without the static CPU "
                             "manager policy)")
    endpoint: str = Field("", description="ZeroMQ endpoint of the gateway's ROUTER; empty = workers.ipc in run_dir")
    heartbeat_s: float = Field(0.5, gt=0, description="seconds between a worker's heartbeats")
    dead_after_s: float = Field(2.0, gt=0, description="a worker silent this many seconds is taken out of service")
    fleet_arithmetic: str = Field("", description="the digest of the bits of the start-up probe's answer that "
                                  "every worker must state to join (/health shows the fleet's, fleet.arithmetic); "
                                  "empty = the first worker this gateway admits sets it")
    queue_tokens: int = Field(4096, ge=1, description="per worker: tokens its queue may make it read before 429 "
                                                      "(kept prefixes are not counted; an idle worker takes any "
                                                      "request)")
    queue_requests: int = Field(32, ge=1, description="per worker: requests queued at most; with every worker "
                                                      "full, 429 with Retry-After")
    affinity_slack_tokens: int = Field(384, ge=0, description="a worker holding the request's state prefix gets "
                                                              "it while its queue is at most this many tokens "
                                                              "longer than the least loaded one")
    affinity_memory: int = Field(64, ge=0, description="state prefixes the gateway remembers sending to each "
                                                       "worker, until its heartbeats list them")
    check_lifecycle: int = Field(0, ge=0, le=1, description="gateway: 1 = check after every event that each "
                                 "pending request is queued at one worker or parked, never both (the "
                                 "tests' fleets); a breach is logged and counted in /health")
    curve_key: str = Field("", description="this process's CURVE secret key file (from jevfleet keys); "
                                           "required when the endpoint is not loopback")
    curve_server_key: str = Field("", description="worker: the gateway's CURVE public key file")
    curve_clients: str = Field("", description="gateway: directory of the CURVE public key files of the "
                                               "workers it accepts")
    run_dir: str = Field("", description="supervisord socket, pid file and logs; empty = /tmp/jevfleet-PORT "
                                         "(/tmp/jevfleet-PORT-workers for role workers)")
    # --- worker (engine) ---
    profile: str = Field("", description="model profile: a name in conf/models, or a path to a .toml; empty = "
                                         "derived from `model`'s GGUF (serve derives it once and gives its "
                                         "gateway and workers the rendered file), or default_profile when no "
                                         "model is given")
    default_profile: str = Field("qwen2.5-coder-1.5b", description="the profile served when neither profile nor "
                                 "model is given: Qwen2.5-Coder 1.5B Instruct (1.1 GB, from PyPI); gemma-3-270m "
                                 "is the small one the tests run (it answers at chance)")
    model: str = Field("", description="GGUF file: with a profile, replaces the profile's model; without, the "
                                       "profile is derived from it; empty = the profile's")
    derived_calibration: int = Field(1, ge=0, le=1, description="1 = a profile derived from `model` is "
                                     "calibrated on the built-in labelled set (eval/plain.jsonl) when first "
                                     "served, 1-2 min once per model file, kept in cache_dir/calibration/; 0 = "
                                     "served uncalibrated")
    ctx: int = Field(8192, ge=1, description="longest prompt of one question, tokens; longer is refused, "
                                             "never truncated; lowered to the model file's trained context "
                                             "when above it (a LongRoPE file's, Phi-3.5's: until the worker's "
                                             "cells fit in its original context)")
    batch_tokens: int = Field(384, ge=1, description="token budget of one scheduler batch")
    threads: int = Field(0, ge=0, description="llama.cpp threads per worker; 0 = the number of cores it is "
                                              "pinned to")
    mode: Literal["deterministic", "fast"] = Field(
        "deterministic", description="deterministic (the same P(yes) on every path) or fast (last bits may "
                                     "depend on the batch's shape)")
    state_cache: int = Field(16, ge=0, le=MAX_STATE_CACHE, description="state snapshots (KV-cache prefixes) "
                                                                       "kept per worker; 0 = off")
    state_cache_mb: int = Field(0, ge=0, description="per worker: KV cells (MiB) all state snapshots may hold "
                                                     "together, in tokens as many as the model's KV cache fits; "
                                                     "0 = from the model: 144 MiB, or 4,096 tokens' worth when "
                                                     "that is more (8,192 tokens of Gemma 3 270M, 4,608 of "
                                                     "Llama 3.2 1B, 4,096 of MiniCPM 1B: 416 MiB); a LongRoPE "
                                                     "file (Phi-3.5): what its 4,096-cell window leaves beside "
                                                     "prompts of 2,048 tokens")
    state_cache_admission: Literal["second-miss", "first-miss"] = Field(
        "second-miss", description="when a state becomes a snapshot: on its second miss among the last "
                                   "state_cache misses, or on its first")
    state_cache_ram_mb: int = Field(2048, ge=0, description="per worker: host memory (MiB) for the saved KV "
                                    "cells of states that left or never entered state_cache, restored "
                                    "instead of read when they come back; 0 = off")
    warmup: int = Field(1, ge=0, le=1, description="1 = warm up before registering; 0 = off")
    cache_dir: str = Field("", description="where the assembled default GGUF, the measured batch shapes and derived profiles' "
                                           "calibrations and rendered files are kept; empty = ~/.cache/jevfleet")

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Flags (the init arguments) over JEV_* environment over the TOML file; no .env file and
        no secrets directory, so nothing else can change a process's settings unseen. When every
        field is given (replace(), default_settings()) the other sources could change nothing:
        they are not read at all."""
        if init_settings.init_kwargs.keys() >= settings_cls.model_fields.keys():
            return (init_settings,)
        return init_settings, env_settings, TomlConfigSettingsSource(settings_cls, toml_file=config_file())

    @property
    def worker_count(self) -> int:
        """`workers`, or as many sets of cores_per_worker cores as this process may run on: the same
        affinity mask worker/cores.py cuts into the sets it pins worker k to. `jevfleet serve`
        starts fewer when memory holds fewer (shared/memory.plan_workers)."""
        if self.workers > 0:
            return self.workers
        return max(1, len(os.sched_getaffinity(0)) // self.cores_per_worker)

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
        return {env_var(name): str(value) for name, value in self.model_dump().items()}


def env_var(name: str) -> str:
    """The environment variable of setting `name`: JEV_BATCH_TOKENS for batch_tokens."""
    return ENV_PREFIX + name.upper()


def default_text(name: str) -> str:
    """Setting `name`'s default as it is written in the TOML file (strings quoted)."""
    return json.dumps(Settings.model_fields[name].default)


def config_file() -> Path:
    """The TOML file: $JEV_CONFIG, else conf/jevfleet.toml. A missing file is an error, not an
    empty configuration: a mistyped --config must not fall back to the defaults unnoticed."""
    path = Path(os.environ.get(CONFIG_ENV) or DEFAULT_CONFIG)
    if not path.is_file():
        raise SettingsError(f"settings file {path} does not exist")
    return path


def _explained(error: ValidationError) -> SettingsError:
    """pydantic's errors as lines that name each setting and where it may have come from."""
    lines = []
    for item in error.errors():
        name = ".".join(str(part) for part in item["loc"])
        if item["type"] == "extra_forbidden":
            lines.append(f"unknown setting {name!r} (in {config_file()}, or passed by name)")
        else:
            flag = "--" + name.replace("_", "-")
            lines.append(f"setting {name} = {item['input']!r}: {item['msg']} "
                         f"(from {flag}, {env_var(name)} or {config_file()})")
    return SettingsError("; ".join(lines))


def _checked(build: Callable[[], Settings]) -> Settings:
    try:
        return build()
    except ValidationError as exc:
        raise _explained(exc) from None


def load_settings(overrides: Mapping[str, Any] | None = None) -> Settings:
    """This process's settings: the TOML file < JEV_* environment < `overrides` (the flags given;
    a None value is a flag not given)."""
    given = {name: value for name, value in (overrides or {}).items() if value is not None}
    return _checked(lambda: Settings(**given))


def replace(settings: Settings, **changes: Any) -> Settings:
    """A copy with `changes`, checked like any setting. Every field is passed as an argument, so
    neither the file nor the environment changes a value."""
    return _checked(lambda: Settings(**{**settings.model_dump(), **changes}))


def default_settings(**changes: Any) -> Settings:
    """The model's defaults with `changes`, whatever the file and JEV_* variables say: for tests
    and benchmarks that must not depend on the environment they run in. One exception:
    JEV_DEFAULT_PROFILE, the model a test or benchmark runs when it names none (tests/tiers.py
    sets the small one, so the suite does not run the 1.5B default wherever the model does not matter)."""
    default_profile = os.environ.get(env_var("default_profile"))
    pinned = {"default_profile": default_profile} if default_profile else {}
    return replace(Settings.model_construct(), **{**pinned, **changes})
