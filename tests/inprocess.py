"""The gateway in this process, without the model: the real app (gateway.app.create_app), the real
Fleet over real ZeroMQ and the real HTTP server, with a scripted worker (jevfleet/harness/scripted_worker.py)
answering every job and a byte tokenizer standing in for the GGUF's vocabulary.

It runs on aiohttp's TestServer in an event loop of its own thread, so synchronous callers
(urllib, hypothesis properties, the typesafe SDK) reach it over loopback HTTP as they reach a
fleet. Everything before inference (body, validation, checks, prompts, errors, auth, headers,
backpressure) is the product's code; only the token ids and the margins are made up.
"""
from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import zmq.asyncio
from aiohttp.test_utils import TestServer

from gateway.app import create_app
from gateway.fleet import Fleet
from gateway.reading import server_options
from jevfleet.harness.scripted_worker import ScriptedWorker
from shared.config import default_settings
from shared.derive import serving_profile
from shared.profiles import Profile, preamble_tokens

PROFILE = "gemma-3-270m"  # pinned: the tests' expected bodies name it
BOS, YES, NO = 256, 257, 258


class ByteTokenizer:
    """A unit-test double of gateway.tokenizer.Tokenizer: one token per UTF-8 byte. Longer than the
    real tokenizer's ids for any text, so a text the real one refuses as too long is refused too."""

    def __init__(self, profile: Profile) -> None:
        self.profile = profile
        self.yes_ids, self.no_ids = [YES], [NO]
        self.preamble_tokens = len(preamble_tokens(self.encode, profile))

    def encode(self, text: str, *, add_bos: bool = False) -> list[int]:
        return [BOS] * add_bos + list(text.encode("utf-8"))

    async def encode_async(self, prefix: str, suffixes: list[str]) -> tuple[list[int], list[list[int]]]:
        return self.encode(prefix, add_bos=self.profile.add_bos), [self.encode(s) for s in suffixes]

    def close(self) -> None:
        pass


class InProcessGateway:
    """One gateway and one scripted worker, started on construction; `url` as a Fleet has it."""

    def __init__(self, run_dir: Path, *, api_key: str = "", workers: int = 1) -> None:
        """workers: how many the gateway expects; one scripted worker joins whatever the number."""
        self.settings = default_settings(workers=workers, run_dir=str(run_dir), endpoint=f"ipc://{run_dir}/w.ipc",
                                         heartbeat_s=0.05, dead_after_s=1.0, profile=PROFILE, check_lifecycle=1)
        self.api_key = api_key
        self.model_file = run_dir / "model.gguf"  # /health reports its SHA-256; nothing reads it as a model
        self.model_file.write_bytes(b"GGUF stand-in")
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="in-process gateway", daemon=True)
        self.thread.start()
        self.url = self._run(self._start())

    def _run(self, coro, timeout: float = 30):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    async def _start(self) -> str:
        profile = serving_profile(self.settings)
        tokenizer = ByteTokenizer(profile)
        self.fleet = Fleet(self.settings, preamble_tokens=tokenizer.preamble_tokens)
        app = create_app(self.settings, profile=profile, model_file=self.model_file, tokenizer=tokenizer,
                         fleet=self.fleet, api_key=self.api_key)
        self.server = TestServer(app, host="127.0.0.1")
        await self.server.start_server(**server_options(self.settings))  # as run_gateway_process serves it
        self.zctx = zmq.asyncio.Context()
        self.worker = await ScriptedWorker(self.zctx, self.settings.zmq_endpoint, "inprocess/w0").start()
        self.answering = asyncio.create_task(self.worker.answer_every_score())
        async with asyncio.timeout(10):
            while not any(w.up for w in self.fleet.workers.values()):
                await asyncio.sleep(0.01)
        return str(self.server.make_url("")).rstrip("/")

    async def _stop(self) -> None:
        self.answering.cancel()
        self.worker.close()
        await self.server.close()  # runs the app's cleanup: the fleet stops
        self.zctx.term()

    def stop(self) -> None:
        self._run(self._stop())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()
