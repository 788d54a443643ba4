"""CURVE on the gateway↔worker link: when keys are required, and that only known workers get in."""
from __future__ import annotations

import asyncio
import subprocess
import sys

import pytest
import zmq.asyncio

from client.net import free_port
from gateway.fleet import Fleet
from jevfleet.harness.scripted_worker import ScriptedWorker
from shared.config import PROJECT_ROOT, Settings, default_settings
from shared.curve import CurveError, gateway_keys, is_local, make_keys, worker_keys


@pytest.mark.parametrize("endpoint, local", [
    ("ipc:///tmp/x.ipc", True), ("inproc://x", True), ("tcp://127.0.0.1:5555", True),
    ("tcp://localhost:5555", True), ("tcp://[::1]:5555", True), ("tcp://127.3.0.1:1", True),
    ("tcp://*:5555", False), ("tcp://0.0.0.0:5555", False), ("tcp://10.1.2.3:5555", False),
    ("tcp://gateway.example:5555", False), ("tcp://eth0:5555", False),
])
def test_only_loopback_endpoints_count_as_local(endpoint, local):
    assert is_local(endpoint) is local


def test_a_remote_endpoint_without_keys_is_refused_and_names_the_flags():
    remote = default_settings(endpoint="tcp://10.1.2.3:5555")
    with pytest.raises(CurveError, match="--curve-key, --curve-server-key"):
        worker_keys(remote)
    with pytest.raises(CurveError, match="--curve-key, --curve-clients"):
        gateway_keys(remote)
    assert worker_keys(default_settings(endpoint="tcp://127.0.0.1:5555")) is None


def test_a_worker_without_keys_exits_non_zero_before_loading_the_model():
    out = subprocess.run([sys.executable, "-m", "jevfleet", "worker", "--endpoint", "tcp://10.1.2.3:5555"],
                         cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "CURVE keys are required" in out.stderr


def test_only_workers_with_an_accepted_key_can_join(tmp_path):
    make_keys(tmp_path / "keys", workers=1)
    make_keys(tmp_path / "stranger", workers=1)
    endpoint = f"tcp://127.0.0.1:{free_port()}"  # keys given: used on loopback too
    gw = default_settings(endpoint=endpoint, curve_key=str(tmp_path / "keys/gateway.key_secret"),
                          curve_clients=str(tmp_path / "keys/workers"))

    def client(keys_dir: str) -> Settings:
        return default_settings(endpoint=endpoint,
                                curve_key=str(tmp_path / keys_dir / "workers/worker-00.key_secret"),
                                curve_server_key=str(tmp_path / "keys/gateway.key"))

    async def go():
        fleet = Fleet(gw)
        await fleet.start()
        ctx = zmq.asyncio.Context()
        workers = [ScriptedWorker(ctx, endpoint, "known", keys=worker_keys(client("keys")), watch_handshake=True),
                   ScriptedWorker(ctx, endpoint, "stranger", keys=worker_keys(client("stranger")),
                                  watch_handshake=True),
                   ScriptedWorker(ctx, endpoint, "plain", watch_handshake=True)]
        try:
            for w in workers:
                await w.start()
            # the link refused the other two (their frames can never arrive), and let "known" in
            assert [await w.handshake() for w in workers] == [True, False, False]
            async with asyncio.timeout(3):
                while "known" not in fleet.workers:
                    await asyncio.sleep(0.01)
            assert sorted(fleet.workers) == ["known"]
        finally:
            for w in workers:
                w.close()
            ctx.term()
            await fleet.stop()

    asyncio.run(go())
