"""`make chaos`: nothing silently wrong while workers, gateways and links fail (issue 30).

1. Reference: a one-worker fleet on loopback answers the run's fixed requests
   (loadtest/chaos_requests.py) to one client, one at a time.
2. Chaos: the same requests, in turn, from CLIENTS closed-loop clients through HAProxy to two
   gateways and three workers on network namespaces (chaos_fleet.py), while faults are injected
   one after another (chaos_faults.py: rounds of every kind in a seeded order, a seeded pause
   before each, each waited out until the fleet is whole again). The fleet's queues are short
   (QUEUE_REQUESTS per worker: fewer places than clients), so 429s with Retry-After come all along.
3. Retries off: the clients move to a second HAProxy front, the same but with retries off, for
   OFF_ROUNDS rounds of the gateway faults. What its clients see fail (HAProxy's 502/503 for a
   request a dead gateway held) is the cost of retries off: counted and reported on its own.
4. Pass: every 200 equals the reference bit for bit; every other outcome through the retries-on
   front is a 429 or 503 with Retry-After (HAProxy retries what a killed gateway held, so a
   connection error is not documented there); no request lost (each is sent until answered,
   chaos_clients.py's policy); the fleet whole at the end, and its gateways (check_lifecycle on)
   logged no lifecycle breach.

Both passes run the same worker settings (ENGINE: one thread per worker, the same context and
caches), so the comparison does not lean on bit-identity across thread counts. Traffic stays on
loopback and inside the run's own namespaces, which are removed at the end, as is every process.

    python -m loadtest.chaos --duration 600 --seed 1 [--requests 120 --clients 8 --queue-requests 2
                                     --off-rounds 3 --out DIR]
"""
from __future__ import annotations

import argparse
import itertools
import json
import random
import shutil
import signal
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Iterator

from jevfleet.harness import netns
from jevfleet.harness.fleet import CHECKED, start_fleet
from jevfleet.harness.stats import percentile
from loadtest.chaos_clients import DIRECT, DISCONNECTED, SAME, Clients
from loadtest.chaos_faults import GATEWAY_KINDS, KINDS, Fault, Injector, within
from loadtest.chaos_fleet import RETRIES_OFF, RETRIES_ON, ChaosFleet
from loadtest.chaos_requests import reference_answers, requests
from shared.config import default_settings

ENGINE = ["--cores-per-worker", "1", "--threads", "1", "--ctx", "1024", "--state-cache", "4",
          "--state-cache-mb", "36", "--state-cache-ram-mb", "256", "--warmup", "0"]
DEADLINE_S = 20
FLEET = [*ENGINE, "--deadline-s", str(DEADLINE_S), *CHECKED]  # and --queue-requests (Config)
START_TIMEOUT_S = 300
PROGRESS_S = 15.0
DOCUMENTED = (SAME, DISCONNECTED, "429 with Retry-After", "503 with Retry-After")


@dataclass
class Config:
    duration_s: float = 600.0  # traffic under faults (no new fault after it, once min_rounds are done)
    seed: int = 1
    requests: int = 120  # distinct requests, sent in turn
    clients: int = 8
    queue_requests: int = 2  # per worker in the chaos fleet: 3 workers hold 6, fewer than the clients
    off_rounds: int = 3  # rounds of the gateway faults through the retries-off front, after duration_s
    max_requests: int = 200_000  # requests taken at most, whatever the duration
    min_rounds: int = 1  # rounds of every fault kind at least, even past duration_s
    gap_s: tuple[float, float] = (2.0, 6.0)  # seeded pause before each fault
    settle_s: float = 120.0  # after the end, how long requests under way may still be retried
    out: Path | None = None  # report.json, logs of every process


@dataclass
class Report:
    seed: int
    duration_s: float = 0.0
    requests: int = 0  # taken by the clients (each answered, or lost)
    answered: int = 0
    lost: list[int] = field(default_factory=list)
    mismatches: list[dict] = field(default_factory=list)
    outcomes: dict[str, int] = field(default_factory=dict)  # every attempt, by what it came to
    undocumented: dict[str, int] = field(default_factory=dict)  # not through the retries-off front
    refused_429: dict = field(default_factory=dict)  # Clients.refusals(): count, Retry-After values, waited out
    retries_off_s: float = 0.0  # the retries-off phase's length
    retries_off_outcomes: dict[str, int] = field(default_factory=dict)  # attempts through that front
    retries_off_failures: dict[str, int] = field(default_factory=dict)  # ...that were not documented: its cost
    faults: list[dict] = field(default_factory=list)
    faults_by_kind: dict[str, int] = field(default_factory=dict)
    missing_at_end: list[str] = field(default_factory=list)
    lifecycle_breaches: list[str] = field(default_factory=list)
    gateway_counters: dict[str, dict] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return not (self.lost or self.mismatches or self.undocumented or self.missing_at_end
                    or self.lifecycle_breaches) and self.answered == self.requests > 0

    def summary(self) -> str:
        r429 = self.refused_429
        lines = [f"chaos, seed {self.seed}: {self.duration_s:.0f} s under faults (the last {self.retries_off_s:.0f} s "
                 f"through HAProxy without retries); {self.requests} requests, {self.answered} answered, "
                 f"{len(self.lost)} lost, {len(self.mismatches)} answers different from the reference",
                 "faults injected: " + ", ".join(f"{k} {n}" for k, n in self.faults_by_kind.items()),
                 "attempts by outcome: " + ", ".join(f"{k} {n}" for k, n in self.outcomes.items()),
                 f"429s seen: {r429.get('count', 0)} (Retry-After s: {r429.get('retry_after_s', {})}); retried after "
                 f"waiting it out {r429.get('retried_after_waiting', 0)}, early {r429.get('retried_early', 0)}",
                 "retries off, attempts by outcome: "
                 + ", ".join(f"{k} {n}" for k, n in self.retries_off_outcomes.items()),
                 f"retries off, client-visible failures (its cost, not a failure of the run): "
                 f"{sum(self.retries_off_failures.values())} {self.retries_off_failures}"]
        for kind in KINDS:
            times = sorted(f["whole_s"] for f in self.faults if f["kind"] == kind and f["whole_s"] is not None)
            if times:
                lines.append(f"time to whole again, {kind}: {times[0]:.1f} / {percentile(times, 0.5):.1f} / "
                             f"{times[-1]:.1f} s (min / median / max of {len(times)})")
        for f in self.faults:
            whole = "NOT WHOLE" if f["whole_s"] is None else f"whole again after {f['whole_s']:.1f} s"
            seen = "" if f["seen_s"] is None else f"seen {f['seen_s']:.2f} s, "
            moved = "".join(f", {k.replace('_', ' ')} {n}" for k, n in (f["moved"] or {}).items())
            held = "" if f["held"] is None else f", held through it: {f['held']}"
            off = " [retries off]" if f["front"] == RETRIES_OFF else ""
            lines.append(f"  {f['at_s']:7.1f} s  {f['kind']:<24} {f['target']:<28} {seen}{whole}{moved}{held}  "
                         f"({f['note']}){off}")
        lines.append(f"fleet at the end: {'whole' if not self.missing_at_end else self.missing_at_end}; "
                     f"lifecycle breaches {len(self.lifecycle_breaches)}")
        lines.append("PASS" if self.passed else "FAIL")
        return "\n".join(lines)


def unavailable() -> str:
    """Why the chaos run cannot run here, or ""."""
    if reason := netns.unavailable():
        return reason
    return "" if shutil.which("haproxy") else "haproxy is not installed"


def reference(cfg: Config, tmp: Path, say: Callable[[str], None]) -> list[dict]:
    reqs = requests(cfg.seed, cfg.requests)
    fleet = start_fleet(tmp / "reference", workers=1, extra=ENGINE, timeout=START_TIMEOUT_S)
    try:
        started = time.monotonic()
        answers = reference_answers(fleet.url, reqs, say)
        say(f"reference: {len(reqs)} requests answered by one worker in {time.monotonic() - started:.0f} s")
    finally:
        fleet.stop()
    return answers


def run(cfg: Config, say: Callable[[str], None] = print) -> Report:
    """The whole run; the report (passed or not). RuntimeError if the fleet never starts."""
    tmp = Path(cfg.out or tempfile.mkdtemp(prefix="jevfleet-chaos-"))
    for old in ("reference", "fleet"):  # a reused --out: the logs (and their lifecycle lines) of this run only
        shutil.rmtree(tmp / old, ignore_errors=True)
    tmp.mkdir(parents=True, exist_ok=True)
    reqs = requests(cfg.seed, cfg.requests)
    answers = reference(cfg, tmp, say)
    settings = default_settings(deadline_s=DEADLINE_S)
    fleet = ChaosFleet.layout(tmp / "fleet", settings)
    fleet.hosts.tmp.mkdir(exist_ok=True)
    report = Report(cfg.seed)
    try:
        fleet.hosts.create()
        fleet.start([*FLEET, "--queue-requests", str(cfg.queue_requests)])
        if within(lambda: not fleet.missing(), START_TIMEOUT_S) is None:
            raise RuntimeError(f"the chaos fleet did not start: {fleet.missing()}\n{fleet.hosts.logs()}")
        say("chaos fleet whole: 2 gateways behind HAProxy, 3 workers on 3 namespaces")
        clients = Clients(fleet.lb_urls, RETRIES_ON, reqs, answers, cfg.clients, cfg.max_requests,
                          enter=lambda: netns.enter(fleet.hosts.ns("a")))
        _chaos(cfg, fleet, clients, report, say)
        report.missing_at_end = fleet.missing()
        report.lifecycle_breaches = fleet.lifecycle_breaches()
        report.gateway_counters = fleet.fleet_counters()
    except BaseException:
        say(fleet.hosts.logs())
        raise
    finally:
        fleet.hosts.remove()
    if cfg.out:
        (tmp / "report.json").write_text(json.dumps(asdict(report), indent=1))
    return report


def _schedule(rng: random.Random, kinds: tuple[str, ...] = KINDS) -> Iterator[tuple[int, str]]:
    """(rounds done, kind) without end: every kind once a round, in a seeded order."""
    for rounds in itertools.count():
        order = list(kinds)
        rng.shuffle(order)
        yield from ((rounds, kind) for kind in order)


def _chaos(cfg: Config, fleet: ChaosFleet, clients: Clients, report: Report, say: Callable[[str], None]) -> None:
    rng = random.Random(f"chaos-faults:{cfg.seed}")
    started = time.monotonic()
    injector = Injector(fleet, clients, rng, default_settings().dead_after_s, started)
    done = threading.Event()

    def progress() -> None:
        while not done.wait(PROGRESS_S):
            say(f"{time.monotonic() - started:6.0f} s: {clients.taken} requests, {clients.answered} answered, "
                f"{len(clients.mismatches)} different; faults {len(report.faults)}; {clients.tally()}")

    def phase(kinds: tuple[str, ...], over: Callable[[int], bool]) -> bool:
        """Faults of `kinds` until over(rounds done); False if the fleet did not recover from one."""
        for rounds, kind in _schedule(rng, kinds):
            if over(rounds):
                return True
            time.sleep(rng.uniform(*cfg.gap_s))  # the seeded pause before a fault
            fault = injector.inject(kind)
            faults.append(fault)
            report.faults.append(asdict(fault))
            say(f"{fault.at_s:6.1f} s: {kind} of {fault.target}: "
                + ("NOT WHOLE" if fault.whole_s is None else f"whole again after {fault.whole_s:.1f} s")
                + f" ({fault.note}){' [retries off]' if clients.front == RETRIES_OFF else ''}")
            if fault.whole_s is None:  # no point in hurting a fleet that did not recover
                return False
        return True

    ticker = threading.Thread(target=progress, daemon=True)
    clients.start()
    ticker.start()
    faults: list[Fault] = []
    try:
        if phase(KINDS, lambda rounds: rounds >= cfg.min_rounds and time.monotonic() - started >= cfg.duration_s):
            off = time.monotonic()
            clients.front = RETRIES_OFF  # from the next attempt on
            say(f"{off - started:6.1f} s: the clients go through HAProxy without retries")
            try:
                phase(GATEWAY_KINDS, lambda rounds: rounds >= cfg.off_rounds)
            finally:
                clients.front = RETRIES_ON
                report.retries_off_s = time.monotonic() - off
        report.duration_s = time.monotonic() - started
    finally:
        clients.stop(cfg.settle_s)
        done.set()
    report.requests = clients.taken
    report.answered = clients.answered
    report.lost = clients.lost
    report.mismatches = [{"index": i, "body": body} for i, body in clients.mismatches]
    report.outcomes = clients.tally()
    report.undocumented = {k: n for k, n in clients.tally((RETRIES_ON, DIRECT)).items() if k not in DOCUMENTED}
    report.refused_429 = clients.refusals(429)
    report.retries_off_outcomes = clients.tally((RETRIES_OFF,))
    report.retries_off_failures = {k: n for k, n in report.retries_off_outcomes.items() if k not in DOCUMENTED}
    report.faults_by_kind = {k: sum(f.kind == k for f in faults) for k in KINDS}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="chaos", description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=Config.duration_s, help="seconds of traffic under faults")
    parser.add_argument("--seed", type=int, default=Config.seed)
    parser.add_argument("--requests", type=int, default=Config.requests, help="distinct requests, sent in turn")
    parser.add_argument("--clients", type=int, default=Config.clients)
    parser.add_argument("--queue-requests", type=int, default=Config.queue_requests,
                        help="per worker in the chaos fleet (the setting queue_requests): short, so 429s happen")
    parser.add_argument("--off-rounds", type=int, default=Config.off_rounds,
                        help="rounds of the gateway faults through HAProxy without retries, at the end")
    parser.add_argument("--max-requests", type=int, default=Config.max_requests)
    parser.add_argument("--out", type=Path, help="directory for report.json and every process's log")
    args = parser.parse_args(argv)
    if reason := unavailable():
        print(f"chaos: cannot run here: {reason}", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # through the finally blocks: nothing left behind
    cfg = Config(duration_s=args.duration, seed=args.seed, requests=args.requests, clients=args.clients,
                 queue_requests=args.queue_requests, off_rounds=args.off_rounds, max_requests=args.max_requests,
                 out=args.out)
    report = run(cfg, lambda line: print(line, flush=True))
    print(report.summary())
    return 0 if report.passed else 1


if __name__ == "__main__":
    sys.exit(main())
