"""gateway/shedding.py: the 429 decided without reading, parsing or tokenizing, from the real
Fleet's queues (a scripted worker over real ZeroMQ)."""
from __future__ import annotations

import asyncio

import pytest

from gateway.errors import ApiError
from gateway.shedding import refuse_if_full
from tests.test_fleet import run, running, score, settings, until


def test_a_429_with_retry_after_once_no_queue_can_take_one_more_request(tmp_path):
    async def scenario() -> None:
        async with running(settings(tmp_path, queue_requests=1)) as (fleet, worker):
            w = await worker("w")
            refuse_if_full(fleet)  # room: nothing raised
            held = asyncio.create_task(fleet.submit(score("r1")))
            await until(lambda: fleet.workers["w"].queued_requests == 1, "r1 queued")
            with pytest.raises(ApiError) as refused:
                refuse_if_full(fleet)
            assert refused.value.status == 429 and int(refused.value.headers["Retry-After"]) >= 1
            await w.answer(await w.recv())
            await held
            refuse_if_full(fleet)  # room again

    run(scenario())


def test_places_reserved_by_requests_past_the_door_count_as_taken(tmp_path):
    async def scenario() -> None:
        async with running(settings(tmp_path, queue_requests=3)) as (fleet, worker):
            w = await worker("w")
            held = asyncio.create_task(fleet.submit(score("r1")))
            await until(lambda: fleet.workers["w"].queued_requests == 1, "r1 queued")
            refuse_if_full(fleet, reserved=1)  # 2 places free, 1 spoken for
            with pytest.raises(ApiError) as refused:
                refuse_if_full(fleet, reserved=2)
            assert refused.value.status == 429
            await w.answer(await w.recv())
            await held

    run(scenario())
