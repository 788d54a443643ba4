"""gateway/reading.py: no client holds the gateway by being slow or large. Fast tier: the real app on
the gateway's server options with short timeouts and a small body budget, raw sockets as the slow
clients. Fleet tier: 64 stalled uploads and 64 silent connections against a real fleet while normal
clients are served; 60 large stalled uploads that neither stop small requests nor grow the gateway
by more than its body budget."""
from __future__ import annotations

import asyncio
import socket
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import pytest

from client.net import post_json
from gateway.reading import BODY_SLACK, BodyBudget, client_max_size, server_options
from gateway.shedding import BODY_BUDGET
from gateway.shedding import DOOR
from jevfleet.harness.fleet import CHECKED, start_fleet
from jevfleet.harness.load import program_pid
from jevfleet.harness.slow_clients import CLOSED, open_connections, outcome, stalled_upload, upload_head
from shared.config import default_settings
from tests.test_fleet import run, until
from tests.test_shedding import BODY, SMALL, app_client, scripted_worker

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


LARGE = 150_000  # declared by each large upload below; over SMALL_BODY_BYTES
BUDGET = dict(max_body_bytes=100_000, body_bytes_in_flight=4 * (100_000 + BODY_SLACK), body_timeout_s=60)


def test_uploads_past_the_body_budget_get_503_unread_and_small_requests_still_get_in(tmp_path):
    """Three quarters of the budget hold three large uploads; the fourth is told 503 with
    Retry-After before its body is read, while a small request is served; the bytes come back."""
    async def scenario() -> None:
        async with app_client(tmp_path, **BUDGET) as (client, fleet):
            budget = client.server.app[BODY_BUDGET]
            async with scripted_worker(fleet) as w:
                held = open_connections(client.port, 3, stalled_upload(LARGE, 1000))
                await until(lambda: budget.in_flight == 3 * LARGE, "three large uploads holding their bytes")
                [refused_sock] = open_connections(client.port, 1, stalled_upload(LARGE, 1000))
                refused = await asyncio.to_thread(outcome, refused_sock, time.monotonic() + GENEROUS_S)
                refused_sock.close()
                assert refused.status == 503 and refused.headers["retry-after"] == "1"
                assert refused.headers["connection"] == "close"
                assert "body_bytes_in_flight" in refused.json()["detail"]["message"]
                assert budget.in_flight == 3 * LARGE  # the refused one holds nothing
                small = asyncio.create_task(client.post("/v1/systemone", json=SMALL))
                await w.answer(await w.recv())
                assert (await small).status == 200
                for sock in held:
                    sock.close()
                await until(lambda: budget.in_flight == 0, "every byte given back")

    run(scenario())


def test_a_budget_that_cannot_hold_one_largest_body_is_refused_naming_the_least_that_can():
    with pytest.raises(ValueError, match="body_bytes_in_flight 1000 cannot hold one body"):
        BodyBudget(1000, largest=4096)
    assert BodyBudget(4 * 4096 // 3 + 1, largest=4096).in_flight == 0


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



LARGE_UPLOADS = 60  # each declares 4 MiB, sends 2 MiB and stalls: 120 MiB sent in all
BODY_CAP = 16 * 1024 * 1024  # three quarters of it hold three such uploads


def resident_bytes(pid: int) -> int:
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for pid {pid}")


def large_upload(port: int) -> socket.socket:
    """A connection that declared 4 MiB and sent 2 MiB of it, or as much as the gateway took
    before it answered 503 and closed."""
    [sock] = open_connections(port, 1, upload_head(4 * 1024 * 1024))
    try:
        sock.sendall(b" " * (2 * 1024 * 1024))
    except OSError:
        pass  # refused and closed while sending: its outcome says which
    return sock


def status_within(sock: socket.socket, seconds: float) -> int | str:
    """Its answer's status, CLOSED, or "held": no answer within `seconds`, its body still awaited."""
    try:
        return outcome(sock, time.monotonic() + seconds).status
    except TimeoutError:
        return "held"


@pytest.mark.fleet
def test_many_large_stalled_uploads_neither_stop_small_requests_nor_hold_more_than_the_cap(tmp_path):
    """Before the budget, 300 such uploads grew a gateway by 799 MiB (60: 170 MiB). With a 16 MiB
    cap three are held and the others are told 503 before their bodies are read (or closed, when
    the 503 was lost to the reset of a close with their bytes unread); small requests are answered
    meanwhile, and the gateway grows by less than the cap and half a MiB per connection: aiohttp's
    read buffers while it reads and drops what a refused upload still sends (its lingering close;
    measured 30-34 MiB in all)."""
    fleet = start_fleet(tmp_path, workers=1, extra=[*CHECKED, "--body-bytes-in-flight", str(BODY_CAP),
                                                    "--body-timeout-s", "120"])
    try:
        pid = program_pid(fleet, "gateway")
        before = resident_bytes(pid)
        with ThreadPoolExecutor(LARGE_UPLOADS) as pool:
            uploads = list(pool.map(lambda _: large_upload(fleet.port), range(LARGE_UPLOADS)))
        with ThreadPoolExecutor(8) as pool:
            answers = list(pool.map(lambda _: post_json(fleet.url + "/v1/systemone", SMALL, timeout=60)[0], range(16)))
        assert answers == [200] * 16
        grown = resident_bytes(pid) - before
        statuses = Counter(status_within(sock, 2.0) for sock in uploads)  # a 503 came long before
        assert statuses["held"] == 3 and statuses[503] + statuses[CLOSED] == LARGE_UPLOADS - 3, statuses
        assert statuses[503] > 0, statuses
        assert grown < BODY_CAP + LARGE_UPLOADS * 512 * 1024, f"the gateway grew by {grown / 2**20:.0f} MiB"
        for sock in uploads:
            sock.close()
    finally:
        assert fleet.stop() == 0, fleet.logs()
