"""gateway/link.py: an endpoint the ROUTER cannot bind is an OSError naming it, which the gateway
turns into a refusal at start (exit 2, one line) like a port already in use."""
from __future__ import annotations

import pytest
import zmq

from client.net import free_port
from gateway.link import BindError, Link
from shared.config import default_settings


def test_an_endpoint_in_use_is_a_bind_error_naming_it():
    endpoint = f"tcp://127.0.0.1:{free_port()}"
    ctx = zmq.Context()
    holder = ctx.socket(zmq.ROUTER)
    holder.bind(endpoint)
    link = Link(default_settings(endpoint=endpoint))
    try:
        with pytest.raises(OSError) as err:
            link.open()
        assert isinstance(err.value, BindError) and endpoint in str(err.value)
        assert "in use" in str(err.value).lower()
    finally:
        link.close()
        holder.close(linger=0)
        ctx.term()


def test_an_endpoint_that_cannot_be_made_is_a_bind_error_and_a_free_one_binds(tmp_path):
    missing = f"ipc://{tmp_path}/no-such-dir/workers.ipc"  # its directory does not exist
    bad = Link(default_settings(endpoint=missing))
    try:
        with pytest.raises(BindError, match="no-such-dir"):
            bad.open()
    finally:
        bad.close()
    good = Link(default_settings(endpoint=f"ipc://{tmp_path}/workers.ipc"))
    try:
        good.open()
    finally:
        good.close()
