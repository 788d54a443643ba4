"""ZeroMQ CURVE on the gateway↔worker link: the keys (`jevfleet keys`) and when they are required.

Over ipc:// or a loopback tcp:// address the link never leaves the host and needs no keys. Any
other tcp:// endpoint crosses a network: then the traffic is encrypted, the gateway accepts only
workers whose public key file is in curve_clients, and a process that would expose the link
without keys refuses to start (CurveError) instead of running in the clear.
"""
from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from pathlib import Path

import zmq
import zmq.auth
from zmq.auth.asyncio import AsyncioAuthenticator

from shared.config import Settings

GATEWAY = "gateway"
WORKERS_DIR = "workers"


class CurveError(ValueError):
    """Keys are required but missing or unreadable."""


def is_local(endpoint: str) -> bool:
    """True for endpoints that cannot be reached from another host."""
    scheme, _, rest = endpoint.partition("://")
    if scheme in ("ipc", "inproc"):
        return True
    host = rest.rpartition(":")[0].strip("[]")
    if host in ("localhost", "lo"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # "*", an interface name or a host name: reachable from outside
        return False


def required(settings: Settings) -> bool:
    return not is_local(settings.zmq_endpoint)


def _enabled(settings: Settings, *needed: str) -> bool:
    """Whether to use CURVE; raises CurveError if it is required and a key setting is empty."""
    if not required(settings) and not settings.curve_key:
        return False
    missing = [name for name in needed if not getattr(settings, name)]
    if missing:
        flags = ", ".join("--" + m.replace("_", "-") for m in missing)
        raise CurveError(f"endpoint {settings.zmq_endpoint} is not loopback: CURVE keys are required "
                         f"({flags}; create them with `jevfleet keys DIR`)")
    return True


def _load(path: str, *, secret: bool) -> tuple[bytes, bytes | None]:
    try:
        public, secret_key = zmq.auth.load_certificate(path)
    except (OSError, ValueError) as exc:
        raise CurveError(f"cannot read CURVE key file {path}: {exc}") from exc
    if secret and secret_key is None:
        raise CurveError(f"{path} holds no secret key (use the .key_secret file)")
    return public, secret_key


@dataclass(frozen=True)
class Keys:
    public: bytes
    secret: bytes
    server: bytes | None = None  # a worker's: the gateway's public key; None on the gateway

    def apply(self, sock: zmq.Socket) -> None:
        sock.curve_secretkey = self.secret
        sock.curve_publickey = self.public
        if self.server is None:
            sock.curve_server = True
        else:
            sock.curve_serverkey = self.server


def gateway_keys(settings: Settings) -> Keys | None:
    """The ROUTER's keys, or None when the link stays on this host and no key is given. The
    gateway also runs authenticator(): without it any worker knowing the server key gets in."""
    if not _enabled(settings, "curve_key", "curve_clients"):
        return None
    if not Path(settings.curve_clients).is_dir():
        raise CurveError(f"curve_clients {settings.curve_clients} is not a directory of worker public keys")
    public, secret = _load(settings.curve_key, secret=True)
    return Keys(public=public, secret=secret)


def worker_keys(settings: Settings) -> Keys | None:
    """A worker's DEALER keys, or None when the link stays on this host and no key is given."""
    if not _enabled(settings, "curve_key", "curve_server_key"):
        return None
    public, secret = _load(settings.curve_key, secret=True)
    server, _ = _load(settings.curve_server_key, secret=False)
    return Keys(public=public, secret=secret, server=server)


def authenticator(ctx: zmq.Context, settings: Settings) -> AsyncioAuthenticator:
    """ZAP handler admitting only the workers whose public key files are in curve_clients."""
    auth = AsyncioAuthenticator(ctx)
    auth.start()
    auth.configure_curve(domain="*", location=settings.curve_clients)
    return auth


def make_keys(directory: Path, workers: int = 1) -> list[Path]:
    """gateway.key(+_secret) and workers/worker-NN.key(+_secret) in `directory`; returns the files.
    A worker host needs gateway.key and its own .key_secret; the gateway host needs
    gateway.key_secret and the workers/ directory (only its *.key public files are read)."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / WORKERS_DIR).mkdir(exist_ok=True)
    made = list(zmq.auth.create_certificates(str(directory), GATEWAY))
    for n in range(workers):
        made += zmq.auth.create_certificates(str(directory / WORKERS_DIR), f"worker-{n:02d}")
    for path in made:
        if str(path).endswith("_secret"):
            Path(path).chmod(0o600)
    return [Path(p) for p in made]
