"""The floor under a 429: a bare aiohttp server that refuses every request at once.

    python -m bench.refuse_all --port P

It listens as the gateway does (same backlog, same server options) and answers every POST with
429 + Retry-After after reading the body, doing nothing else. bench/soak.py sends the same burst to
it and to the fleet: what a client waits for this server's 429 is the cost of one aiohttp event
loop taking 400 connections in turn on this machine, which no decision inside the gateway can
shorten; the gateway's own share is the difference.
"""
from __future__ import annotations

import argparse

from aiohttp import web

from gateway.app import LISTEN_BACKLOG
from gateway.reading import server_options
from shared.config import load_settings


async def refuse(request: web.Request) -> web.Response:
    await request.read()
    return web.json_response({"detail": "every worker's queue is full"}, status=429, headers={"Retry-After": "1"})


async def health(_: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port", type=int, required=True)
    args = ap.parse_args()
    app = web.Application()
    app.router.add_post("/{tail:.*}", refuse)
    app.router.add_get("/health", health)
    web.run_app(app, host="127.0.0.1", port=args.port, access_log=None, print=None,
                backlog=LISTEN_BACKLOG, **server_options(load_settings()))


if __name__ == "__main__":
    main()
