"""gateway/request_ids.py, and the client's x-request-id followed through a real gateway app to
the Score its worker receives (a scripted worker over real ZeroMQ; the real vocabulary)."""
from __future__ import annotations

import asyncio

import zmq.asyncio
from aiohttp.test_utils import TestClient, TestServer

from gateway.app import FLEET, create_app
from gateway.request_ids import request_id, unique
from shared.config import Settings
from shared.messages import Score
from tests.fake_worker import FakeWorker
from tests.load import decision


def test_a_sane_client_id_is_used_and_anything_else_replaced():
    for sane in ("client-id-17", "0b7c9d2e-3f41-4c55-9a0e-1d2c3b4a5f60", "01HZX3K9Q7:req_4.2"):
        assert request_id({"x-request-id": sane}) == sane
    assert request_id({"x-typesafe-request-id": "ts-9"}) == "ts-9"
    assert request_id({"x-request-id": "bad id", "x-typesafe-request-id": "ts-9"}) == "ts-9"
    for insane in ("", "a b", "x" * 129, "id\u00e9", "id;drop", "<script>", "a/b"):
        generated = request_id({"x-request-id": insane})
        assert generated != insane and len(generated) == 32 and int(generated, 16) >= 0


def test_an_id_already_in_flight_gets_a_suffix():
    assert unique("r1", {}) == "r1"
    twin = unique("r1", {"r1": object()})
    assert twin.startswith("r1.") and len(twin) == 11


def test_the_clients_id_reaches_the_worker_and_the_log(tmp_path, caplog):
    async def scenario() -> None:
        app = create_app(Settings(endpoint=f"ipc://{tmp_path}/w.ipc", run_dir=str(tmp_path), workers=1))
        async with TestClient(TestServer(app)) as client:
            ctx = zmq.asyncio.Context()
            worker = await FakeWorker(ctx, app[FLEET].endpoint, "w", serves=app[FLEET].admission.expected).start()
            try:
                async def answer_one() -> Score:
                    score = await worker.recv(timeout=10)
                    await worker.answer(score)
                    return score

                for sent, expected in (("trace-me-1", "trace-me-1"), ("not sane!", None)):
                    answered = asyncio.create_task(answer_one())
                    resp = await client.post("/v1/systemone", json=decision("Ok."), headers={"x-request-id": sent})
                    assert resp.status == 200, await resp.text()
                    rid = resp.headers["x-request-id"]
                    assert (await answered).request_id == rid == resp.headers["x-typesafe-request-id"]
                    assert rid == expected if expected else len(rid) == 32
                    assert f"request {rid}: answered" in caplog.text
            finally:
                worker.close()
                ctx.term()

    with caplog.at_level("INFO", logger="jevfleet.gateway"):
        asyncio.run(scenario())
