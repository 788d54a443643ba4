"""Do answers move under load? The same first-seen requests at one client and at eight, each time
to a freshly started server, ours and llama-server.

    make bench NAME=consistency           # or: python -m bench consistency [--requests 200] [--clients 8]

Per target: start it, send the N requests of a fresh workload one at a time, stop it; start it
again, send the same N from `--clients` concurrent clients (each on its own kept connection,
taking the next request as it finishes one), stop it. Both passes are first-seen to the server,
so only the load differs: batch mates, slots, the order in which requests meet. Then, question by
question: how many P(yes) are bit-identical, the largest |ΔP|, and how many cross 0.5.

P(yes) is each server's answer read the same way: ours as served; llama-server's from its top-20
log-probabilities with the profile's yes/no tokens and calibration (loadtest/validate.py), so
both pass through the same monotone map and a flip across 0.5 means the same thing. Not run by
the tests; quote it with the load average.
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from client.net import KeptConnection
from loadtest import fresh, servers, validate
from loadtest.protocols import PROTOCOLS
from loadtest.workloads import Item
from shared.config import load_settings
from shared.derive import serving_profile
from shared.profiles import Profile

TARGETS = ("jevfleet", "llama-server")


def p_yes(target: str, profile: Profile, item: Item, body: Any) -> list[float]:
    """The P(yes) of each question of a noul request, in question order."""
    if target == "jevfleet":
        return [float(body["answers"][qid]["noul"]) for qid in item.question_ids]
    results = body if isinstance(body, list) else [body]
    return [validate.check_llama_server_completion(result, profile) for result in results]


def one_pass(target: str, profile: Profile, items: list[Item], clients: int, logs: Path) -> list[list[float]]:
    """A fresh server answers `items` from `clients` concurrent clients: P(yes) per item."""
    server = servers.ours_or_llama_server(target, profile, logs)
    protocol = PROTOCOLS[target]
    answers: list[list[float]] = [[] for _ in items]
    with server as url:
        local = threading.local()
        connections: list[KeptConnection] = []
        lock = threading.Lock()

        def ask(index: int) -> None:
            if not hasattr(local, "conn"):
                local.conn = KeptConnection(url, timeout=600)
                with lock:
                    connections.append(local.conn)
            status, _, body = local.conn.post_json(protocol.path, protocol.body(profile, items[index]))
            assert status == 200, str(body)[:300]
            answers[index] = p_yes(target, profile, items[index], body)

        with ThreadPoolExecutor(clients) as pool:  # a free client takes the next request
            list(pool.map(ask, range(len(items))))
        for conn in connections:
            conn.close()
    return answers


def compare(alone: list[list[float]], loaded: list[list[float]]) -> dict[str, float]:
    pairs = list(zip(itertools.chain(*alone), itertools.chain(*loaded)))
    return {"answers": len(pairs),
            "identical": sum(a == b for a, b in pairs),
            "largest |ΔP|": max(abs(a - b) for a, b in pairs),
            "flips across 0.5": sum((a >= 0.5) != (b >= 0.5) for a, b in pairs)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--workload", default="W1-fresh", choices=("W1-fresh", "W4-fresh"))
    parser.add_argument("--targets", default=",".join(TARGETS))
    args = parser.parse_args()
    settings = load_settings()
    profile = serving_profile(settings)
    items = [fresh.item(args.workload, i) for i in range(args.requests)]
    print(f"# python -m bench.consistency --requests {args.requests} --clients {args.clients} "
          f"--workload {args.workload}  (load average {os.getloadavg()[0]:.2f})", flush=True)
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        for target in filter(None, args.targets.split(",")):
            alone = one_pass(target, profile, items, 1, Path(tmp) / f"{target}-1")
            loaded = one_pass(target, profile, items, args.clients, Path(tmp) / f"{target}-{args.clients}")
            rows[target] = compare(alone, loaded)
            print(f"{target}: {json.dumps(rows[target])}", flush=True)
    print(f"\n(load average {os.getloadavg()[0]:.2f} at the end)")
    print(f"| server | answers | bit-identical at 1 and {args.clients} clients | largest abs(ΔP) | flips across 0.5 |")
    print("|---|---|---|---|---|")
    for target, row in rows.items():
        print(f"| {target} | {row['answers']} | {row['identical']} | {row['largest |ΔP|']:.4f} | {row['flips across 0.5']} |")


if __name__ == "__main__":
    main()
