"""Overload soak and refusal speed (issue 14, items 4 and 6): a real fleet far past capacity.

1. warm-up at normal load (NORMAL closed-loop clients) -> pre-soak p50, RSS and open fds;
2. a burst of BURST requests at once -> time to a 429, client-side and the gateway's own
   (Server-Timing total), p50/p99; beside it the same burst at a bare aiohttp server that refuses
   everything at once (this module's --refuse-all, listening as the gateway does: same backlog and
   server options, 429 + Retry-After after reading the body): the client-side floor of one event loop on this machine
   (--overload-s 0 stops after the bursts);
3. CLIENTS closed-loop clients for --overload-s -> every answer 200 or 429/503 with Retry-After,
   RSS/fds sampled;
4. --normal-s at normal load again -> post-soak p50, RSS and fds.

Figures only (no pass/fail): run it under the CPU lock and quote the load average it prints.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import aiohttp
from aiohttp import web

from client.net import free_port, server_timing
from gateway.app import LISTEN_BACKLOG
from gateway.reading import server_options
from jevfleet.harness.fleet import start_fleet
from jevfleet.harness.load import decision, program_pid, rss_kb, states
from jevfleet.harness.stats import percentile
from loadtest import servers
from shared.config import load_settings

PATH = "/v1/systemone"


def fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


class Tally:
    def __init__(self) -> None:
        self.status: Counter = Counter()
        self.no_retry_after = 0
        self.latency: dict[int, list[float]] = {}  # status -> client-side ms
        self.server_ms: dict[int, dict[str, list[float]]] = {}  # status -> Server-Timing entry -> ms

    async def post(self, session: aiohttp.ClientSession, url: str, payload: bytes) -> None:
        started = time.perf_counter()
        try:
            async with session.post(url + PATH, data=payload, headers={"Content-Type": "application/json"}) as resp:
                await resp.read()
                status, headers = resp.status, resp.headers
        except (aiohttp.ClientError, asyncio.TimeoutError):
            self.status["connection error"] += 1
            return
        self.status[status] += 1
        self.latency.setdefault(status, []).append((time.perf_counter() - started) * 1000)
        for name, ms in server_timing(headers).items():
            self.server_ms.setdefault(status, {}).setdefault(name, []).append(ms)
        if status in (429, 503) and not headers.get("Retry-After"):
            self.no_retry_after += 1

    def p(self, status: int, q: float, server: bool = False) -> float:
        """Client-side ms, or with `server` the gateway's Server-Timing total."""
        values = self.server_ms.get(status, {}).get("total", []) if server else self.latency.get(status, [])
        return percentile(values, q)

    def phases(self, q: float = 0.5) -> str:
        """p50 of every Server-Timing entry of the 200s: where a change in latency went."""
        return ", ".join(f"{name} {percentile(v, q):.1f}" for name, v in self.server_ms.get(200, {}).items())


async def closed_loop(url: str, payloads: list[bytes], clients: int, seconds: float, tally: Tally,
                      sample=None) -> None:
    stop_at = time.monotonic() + seconds
    timeout = aiohttp.ClientTimeout(total=120)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0), timeout=timeout) as session:
        async def client(k: int) -> None:
            i = k
            while time.monotonic() < stop_at:
                await tally.post(session, url, payloads[i % len(payloads)])
                i += 1

        async def sampler() -> None:
            while time.monotonic() < stop_at:
                sample()
                await asyncio.sleep(10)

        await asyncio.gather(*(client(k) for k in range(clients)), *([sampler()] if sample else []))


async def burst(url: str, payloads: list[bytes], n: int) -> Tally:
    tally = Tally()
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0),
                                     timeout=aiohttp.ClientTimeout(total=120)) as session:
        await asyncio.gather(*(tally.post(session, url, payloads[i % len(payloads)]) for i in range(n)))
    return tally


def report_burst(name: str, b: Tally, n: int) -> None:
    print(f"burst of {n} at {name}: {dict(b.status)}; time to a 429: client p50 {b.p(429, .5):.1f} ms "
          f"p99 {b.p(429, .99):.1f} ms, server (Server-Timing total) p50 {b.p(429, .5, True):.2f} ms "
          f"p99 {b.p(429, .99, True):.2f} ms; load average {load_average()}", flush=True)


async def _refuse(request: web.Request) -> web.Response:
    await request.read()
    return web.json_response({"detail": "every worker's queue is full"}, status=429, headers={"Retry-After": "1"})


async def _health(_: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


def refuse_all(port: int) -> None:
    """The floor under a 429: what a client waits for this server's 429 is the cost of one aiohttp
    event loop taking the burst's connections in turn on this machine, which no decision inside
    the gateway can shorten; the gateway's own share is the difference."""
    app = web.Application()
    app.router.add_post("/{tail:.*}", _refuse)
    app.router.add_get("/health", _health)
    web.run_app(app, host="127.0.0.1", port=port, access_log=None, print=None,
                backlog=LISTEN_BACKLOG, **server_options(load_settings()))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--overload-s", type=float, default=300)
    ap.add_argument("--normal-s", type=float, default=60)
    ap.add_argument("--warmup-s", type=float, default=60)
    ap.add_argument("--clients", type=int, default=200)
    ap.add_argument("--normal-clients", type=int, default=2)
    ap.add_argument("--burst", type=int, default=400)
    ap.add_argument("--bursts", type=int, default=1, help="burst pairs (the bare server, then the fleet)")
    ap.add_argument("--refuse-all", type=int, default=0, metavar="PORT", help="be the bare server that refuses "
                    "everything, on PORT (the burst's floor, started by the soak itself)")
    args = ap.parse_args()
    if args.refuse_all:
        refuse_all(args.refuse_all)
        return
    payloads = [json.dumps(decision(s)).encode() for s in states(64, tag="soak ")]
    print(f"load average at start: {load_average()}", flush=True)
    with tempfile.TemporaryDirectory(prefix="jevfleet-soak-") as run_dir:
        fleet = start_fleet(Path(run_dir), workers=1)
        try:
            pids = {"gateway": program_pid(fleet, "gateway"),
                    "worker": next(iter(fleet.health()[1]["workers"]))["pid"]}

            def snapshot() -> dict:
                return {name: (rss_kb(pid) // 1024, fds(pid)) for name, pid in pids.items()}

            before = Tally()
            asyncio.run(closed_loop(fleet.url, payloads, args.normal_clients, args.warmup_s, before))
            warm = snapshot()
            print(f"warm-up ({args.warmup_s:.0f} s, {args.normal_clients} clients): {dict(before.status)}, "
                  f"p50 {before.p(200, .5):.0f} ms (gateway p50s: {before.phases()}); RSS MB / fds {warm}", flush=True)

            # a bare aiohttp server that answers 429 at once (--refuse-all), the client-side floor
            floor_cmd = [sys.executable, "-m", "bench.soak", "--refuse-all", str(port := free_port())]
            with servers.running("refuse_all", floor_cmd, port, servers.answers_200("/health"), Path(run_dir)) as floor:
                for _ in range(args.bursts):  # the floor's burst, then the fleet's, side by side
                    report_burst("a bare aiohttp 429 server", asyncio.run(burst(floor, payloads, args.burst)),
                                 args.burst)
                    report_burst("the fleet", asyncio.run(burst(fleet.url, payloads, args.burst)), args.burst)
                    fleet.wait_for(lambda h: all(w["queued_requests"] == 0 for w in h["workers"]),
                                   "idle after the burst")
            if args.overload_s <= 0:
                return

            samples: list[dict] = []
            soak = Tally()
            asyncio.run(closed_loop(fleet.url, payloads, args.clients, args.overload_s, soak,
                                    sample=lambda: samples.append(snapshot())))
            print(f"overload ({args.overload_s:.0f} s, {args.clients} clients): {dict(soak.status)}, "
                  f"429/503 without Retry-After: {soak.no_retry_after}; 200 p50 {soak.p(200, .5):.0f} ms; "
                  f"429 client p50/p99 {soak.p(429, .5):.1f}/{soak.p(429, .99):.1f} ms, gateway "
                  f"{soak.p(429, .5, True):.2f}/{soak.p(429, .99, True):.2f} ms; load average {load_average()}",
                  flush=True)
            print(f"RSS MB / fds every 10 s during the overload: {samples}", flush=True)

            after = Tally()
            asyncio.run(closed_loop(fleet.url, payloads, args.normal_clients, args.normal_s, after))
            end = snapshot()
            p50_before, p50_after = before.p(200, .5), after.p(200, .5)
            print(f"normal again ({args.normal_s:.0f} s): {dict(after.status)}, p50 {p50_after:.0f} ms "
                  f"(before the soak {p50_before:.0f} ms, {100 * (p50_after / p50_before - 1):+.1f} %); "
                  f"gateway p50s after: {after.phases()}", flush=True)
            for name in pids:
                (r0, f0), (r1, f1) = warm[name], end[name]
                print(f"{name}: RSS {r0} -> {r1} MB ({100 * (r1 / r0 - 1):+.1f} %), open fds {f0} -> {f1}")
            restarts = fleet.health()[1]["workers"][0]["pid"] != pids["worker"]
            print(f"worker restarted: {restarts}; load average at end: {load_average()}")
        finally:
            fleet.stop()


if __name__ == "__main__":
    main()
