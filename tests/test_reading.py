"""gateway/reading.py: no client holds the gateway by being slow. Fast tier: the real app on the
gateway's server options with short timeouts, raw sockets as the slow clients. Fleet tier: 64
stalled uploads and 64 silent connections against a real fleet while normal clients are served."""
from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from gateway.reading import BODY_SLACK, client_max_size, server_options
from gateway.shedding import DOOR
from jevfleet.harness.fleet import CHECKED, start_fleet
from jevfleet.harness.net import post_json
from jevfleet.harness.slow_clients import CLOSED, open_connections, outcome, stalled_upload, upload_head
from shared.config import default_settings
from tests.test_fleet import run, until
from tests.test_shedding import BODY, SMALL, app_client

GENEROUS_S = 10.0  # a deadline for what should take a fraction of it


def test_the_server_options_carry_the_header_timeout_and_keep_compressed_bodies_as_sent():
    s = default_settings(header_timeout_s=7.0, max_body_bytes=1000)
    assert server_options(s) == {"auto_decompress": False, "keepalive_timeout": 7.0}
    assert client_max_size(s) == 1000 + BODY_SLACK


def test_a_body_that_does_not_arrive_in_time_gets_a_408_and_the_connection_closed(tmp_path):
    async def scenario() -> None:
        async with app_client(tmp_path, body_timeout_s=0.2) as (client, _):
            [slow] = open_connections(client.port, 1, stalled_upload(1000, 10))
            answer = await asyncio.to_thread(outcome, slow, time.monotonic() + GENEROUS_S)
            slow.close()
            assert answer.status == 408 and answer.headers["connection"] == "close"
            assert answer.headers["content-type"].startswith("application/json") and answer.headers["x-request-id"]
            assert answer.json() == {"detail": "Request body not received within 0.2 s"}
            assert [p.split(";")[0] for p in answer.headers["server-timing"].split(", ")] == ["parse", "total"]
            assert client.server.app[DOOR].describe() == {"receiving": 0, "passing": 0}

    run(scenario())


def test_a_body_sent_in_pieces_within_the_timeout_is_read(tmp_path):
    async def scenario() -> None:
        async with app_client(tmp_path, body_timeout_s=60) as (client, _):
            door = client.server.app[DOOR]
            [sock] = open_connections(client.port, 1, upload_head(len(BODY)) + BODY[:10])
            await until(lambda: door.describe()["receiving"] == 1, "receiving its body")
            sock.sendall(BODY[10:])
            answer = await asyncio.to_thread(outcome, sock, time.monotonic() + GENEROUS_S)
            sock.close()
            assert answer.status == 503  # read, parsed, tokenized; no worker up to take it
            assert door.describe() == {"receiving": 0, "passing": 0}

    run(scenario())


@pytest.mark.parametrize("sent", [b"", b"POST /v1/systemone HTTP/1.1\r\nContent-Le"], ids=["nothing", "half headers"])
def test_a_connection_without_a_whole_request_line_and_headers_in_time_is_closed(tmp_path, sent):
    async def scenario() -> None:
        async with app_client(tmp_path, header_timeout_s=0.2) as (client, _):
            [sock] = open_connections(client.port, 1, sent)
            answer = await asyncio.to_thread(outcome, sock, time.monotonic() + GENEROUS_S)
            sock.close()
            assert answer.status == CLOSED  # no answer: there is no request to answer

    run(scenario())


STALLED = 64
TIMEOUT_S = 5.0  # both timeouts of the fleet below
SLACK_S = 15.0  # on top of TIMEOUT_S, for a deadline that a loaded 2-core machine still meets


@pytest.mark.fleet
def test_stalled_uploads_and_silent_connections_keep_no_client_out(tmp_path):
    fleet = start_fleet(tmp_path, workers=1, extra=[*CHECKED, "--header-timeout-s", str(TIMEOUT_S),
                                                    "--body-timeout-s", str(TIMEOUT_S)])
    try:
        stalled = open_connections(fleet.port, STALLED, stalled_upload(1000, 10))
        silent = open_connections(fleet.port, STALLED)
        deadline = time.monotonic() + TIMEOUT_S + SLACK_S
        fleet.wait_for(lambda body: body["door"]["receiving"] == STALLED, "the uploads waiting for their bodies",
                       timeout=TIMEOUT_S)
        # the uploads would hold all 32 places of the one worker if they counted: 8 clients, 32 requests,
        # every one answered 200 while the uploads wait
        with ThreadPoolExecutor(8) as pool:
            answers = list(pool.map(lambda _: post_json(fleet.url + "/v1/systemone", SMALL,
                                                        timeout=TIMEOUT_S + 5)[0], range(32)))
        assert answers == [200] * 32
        stalled_answers = [outcome(sock, deadline) for sock in stalled]
        assert {a.status for a in stalled_answers} <= {408, CLOSED}, [a.status for a in stalled_answers]
        assert all(a.json() == {"detail": f"Request body not received within {TIMEOUT_S:g} s"}
                   for a in stalled_answers if a.status == 408)
        assert [outcome(sock, deadline).status for sock in silent] == [CLOSED] * STALLED
        for sock in stalled + silent:
            sock.close()
        body = fleet.wait_for(lambda body: body["door"] == {"receiving": 0, "passing": 0}, "the door empty",
                              timeout=SLACK_S)
        assert body["fleet"]["inflight"] == 0
    finally:
        assert fleet.stop() == 0, fleet.logs()
    assert not fleet.lifecycle_breaches()
