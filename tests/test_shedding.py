"""gateway/shedding.py: the 429 decided without reading, parsing or tokenizing, from the real
Fleet's queues (a scripted worker over real ZeroMQ); and every refusal answered over HTTP by the
app's error middleware."""
from __future__ import annotations

import asyncio
import json
import time
from contextlib import asynccontextmanager

import pytest
import zmq.asyncio
from aiohttp.test_utils import TestClient, TestServer

from gateway.app import create_app
from gateway.capacity import NO_WORKER_RETRY_S, Unavailable
from gateway.fleet import Fleet
from gateway.reading import server_options
from gateway.shedding import DOOR, refuse_if_full
from jevfleet.harness.scripted_worker import ScriptedWorker
from jevfleet.harness.slow_clients import open_connections, outcome, upload_head
from shared.derive import serving_profile
from tests.inprocess import ByteTokenizer
from tests.test_fleet import run, running, score, settings, until


def test_a_429_with_retry_after_once_no_queue_can_take_one_more_request(tmp_path):
    async def scenario() -> None:
        async with running(settings(tmp_path, queue_requests=1)) as (fleet, worker):
            w = await worker("w")
            refuse_if_full(fleet)  # room: nothing raised
            held = asyncio.create_task(fleet.submit(score("r1")))
            await until(lambda: fleet.queues["w"].queued_requests == 1, "r1 queued")
            with pytest.raises(Unavailable) as refused:
                refuse_if_full(fleet)
            assert refused.value.status == 429 and refused.value.retry_after >= 1
            await w.answer(await w.recv())
            await held
            refuse_if_full(fleet)  # room again

    run(scenario())


def test_places_reserved_by_requests_past_the_door_count_as_taken(tmp_path):
    async def scenario() -> None:
        async with running(settings(tmp_path, queue_requests=3)) as (fleet, worker):
            w = await worker("w")
            held = asyncio.create_task(fleet.submit(score("r1")))
            await until(lambda: fleet.queues["w"].queued_requests == 1, "r1 queued")
            refuse_if_full(fleet, reserved=1)  # 2 places free, 1 spoken for
            with pytest.raises(Unavailable) as refused:
                refuse_if_full(fleet, reserved=2)
            assert refused.value.status == 429
            await w.answer(await w.recv())
            await held

    run(scenario())


SMALL = {"model": "jev-latest", "state": "s", "questions": {"q": {"type": "noul", "instructions": "Is it?"}}}


@asynccontextmanager
async def app_client(tmp_path, **changes):
    """The real app, served with the gateway's server options, over a Fleet with no worker yet,
    and a test client for it (no model)."""
    s = settings(tmp_path, run_dir=str(tmp_path), **changes)
    profile = serving_profile(s)
    tokenizer = ByteTokenizer(profile)
    fleet = Fleet(s, preamble_tokens=tokenizer.preamble_tokens)
    model_file = tmp_path / "model.gguf"
    model_file.write_bytes(b"GGUF stand-in")
    app = create_app(s, profile=profile, model_file=model_file, tokenizer=tokenizer, fleet=fleet)
    server = TestServer(app)
    await server.start_server(**server_options(s))  # TestClient then uses it as it is
    async with TestClient(server) as client:
        yield client, fleet


@asynccontextmanager
async def scripted_worker(fleet: Fleet, worker_id: str = "w"):
    ctx = zmq.asyncio.Context()
    w = await ScriptedWorker(ctx, fleet.endpoint, worker_id).start()
    try:
        await until(lambda: worker_id in fleet.workers and fleet.workers[worker_id].up, f"{worker_id} up")
        yield w
    finally:
        w.close()
        ctx.term()


def test_refusals_become_http_in_one_place_with_retry_after_and_server_timing(tmp_path):
    async def scenario() -> None:
        async with app_client(tmp_path, queue_requests=1) as (client, fleet):
            resp = await client.post("/v1/systemone", json=SMALL)  # no worker up: 503 at submit
            assert resp.status == 503 and resp.headers["Retry-After"] == str(NO_WORKER_RETRY_S)
            assert await resp.json() == {"detail": {"error_type": "overloaded", "message": "no worker is available"}}
            phases = [p.split(";")[0] for p in resp.headers["Server-Timing"].split(", ")]
            assert phases == ["parse", "validate", "tokenize", "total"]

            async with scripted_worker(fleet) as w:
                held = asyncio.create_task(client.post("/v1/systemone", json=SMALL))
                score = await w.recv()
                resp = await client.post("/v1/systemone", json=SMALL)  # the one place is taken: 429 at the door
                assert resp.status == 429 and int(resp.headers["Retry-After"]) >= 1
                assert (await resp.json())["detail"]["message"] == "every worker's queue is full"
                assert [p.split(";")[0] for p in resp.headers["Server-Timing"].split(", ")] == ["total"]
                await w.answer(score, run_ms=5.0)
                answered = await held
                timings = dict(p.split(";dur=") for p in answered.headers["Server-Timing"].split(", "))
                assert answered.status == 200 and float(timings["inference"]) == 5.0
                assert float(timings["outside"]) >= 0

    run(scenario())


BODY = json.dumps(SMALL).encode()


@asynccontextmanager
async def one_place_an_upload_waiting_and_a_request_queued(tmp_path):
    """queue_requests=1; an upload that has sent its headers and 10 bytes of BODY and waits, then a
    whole request sent and queued at the one worker: (door, worker, upload socket, that request's
    task, its score as the worker got it)."""
    async with app_client(tmp_path, queue_requests=1, body_timeout_s=60) as (client, fleet):
        door = client.server.app[DOOR]
        async with scripted_worker(fleet) as w:
            [slow] = open_connections(client.port, 1, upload_head(len(BODY)) + BODY[:10])
            try:
                await until(lambda: door.describe()["receiving"] == 1, "the upload receiving its body")
                held = asyncio.create_task(client.post("/v1/systemone", json=SMALL))
                yield door, w, slow, held, await w.recv()
            finally:
                slow.close()


def test_a_request_still_sending_its_body_takes_no_place(tmp_path):
    """queue_requests=1: an upload that has sent 10 bytes and waits does not keep a whole request
    from that one place; closing it gives back nothing it did not hold."""
    async def scenario() -> None:
        async with one_place_an_upload_waiting_and_a_request_queued(tmp_path) as (door, w, slow, held, score):
            assert door.describe() == {"receiving": 1, "passing": 0}  # the whole one went past it
            await w.answer(score)
            assert (await held).status == 200
            slow.close()  # the client leaves: its handler is cancelled
            await until(lambda: door.describe() == {"receiving": 0, "passing": 0}, "the door empty")

    run(scenario())


def test_a_body_that_arrives_when_every_place_is_taken_is_refused_before_parsing(tmp_path):
    """The door asks again once the body is in: an upload that began while there was room and
    finished after the last place was taken is told 429 then, not queued behind it."""
    async def scenario() -> None:
        async with one_place_an_upload_waiting_and_a_request_queued(tmp_path) as (door, w, slow, held, score):
            slow.sendall(BODY[10:])
            refused = await asyncio.to_thread(outcome, slow, time.monotonic() + 10)
            assert refused.status == 429 and int(refused.headers["retry-after"]) >= 1
            assert [p.split(";")[0] for p in refused.headers["server-timing"].split(", ")] == ["parse", "total"]
            assert door.describe() == {"receiving": 0, "passing": 0}
            await w.answer(score)
            assert (await held).status == 200

    run(scenario())
