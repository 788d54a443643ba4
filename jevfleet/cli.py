"""The `jevfleet` command: serve (the whole fleet, or one role of it, under supervisord), gateway,
worker, keys, haproxy-conf, decide, and the answer-quality tools eval and calibrate (quality/).

Every setting of conf/jevfleet.toml is also a flag of every subcommand (--batch-tokens for
batch_tokens ...), so one table documents them all.
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import fields
from pathlib import Path
from typing import Sequence

from shared.config import Settings, load_settings

HELP = {
    "host": "address the HTTP gateway listens on (default 127.0.0.1)",
    "port": "HTTP port (default 8017)",
    "max_body_bytes": "request body limit after decompression, bytes (default 4 MiB)",
    "deadline_s": "seconds a request may wait before it is answered 503 (default 30)",
    "tokenizer_threads": "gateway threads that tokenize (default 2)",
    "role": "what serve runs on this host: all (gateway + workers), gateway, or workers (default all)",
    "workers": "worker processes; 0 = one per --cores-per-worker cores (default 0)",
    "cores_per_worker": "cores each worker is pinned to (default 2)",
    "endpoint": "ZeroMQ endpoint of the gateway (default ipc://<run-dir>/workers.ipc)",
    "heartbeat_s": "worker heartbeat period, seconds (default 0.5)",
    "dead_after_s": "a worker silent this long is taken out of service (default 2)",
    "queue_tokens": "tokens a worker's queue may make it read before 429; kept prefixes not counted (default 4096)",
    "queue_requests": "requests queued per worker at most before 429 (default 32)",
    "affinity_slack_tokens": "a worker holding the state prefix gets the request while its queue is "
                             "at most this many tokens longer than the least loaded (default 384)",
    "affinity_memory": "state prefixes the gateway remembers per worker (default 16)",
    "curve_key": "this process's CURVE secret key file (from `jevfleet keys`)",
    "curve_server_key": "worker: the gateway's CURVE public key file",
    "curve_clients": "gateway: directory of worker CURVE public key files it accepts",
    "run_dir": "supervisord socket, pid file and logs (default /tmp/jevfleet-<port>, "
               "/tmp/jevfleet-<port>-workers for role workers)",
    "profile": "model profile name (conf/models/NAME.toml) or path to a .toml",
    "model": "GGUF file overriding the profile's model",
    "ctx": "longest prompt of one question, tokens (default 8192)",
    "batch_tokens": "token budget of one scheduler batch (default 384)",
    "threads": "llama.cpp threads per worker; 0 = its core count (default 0)",
    "mode": "deterministic (same answer on every path, default) or fast",
    "state_cache": "state snapshots kept per worker; 0 = off (default 16)",
    "state_cache_tokens": "tokens all state snapshots may hold together (default 8192)",
    "warmup": "1 = warm up at start and in idle time, 0 = off (default 1)",
    "cache_dir": "where the assembled default model is kept (default ~/.cache/jevfleet)",
}


def _add_settings_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", help="TOML settings file (default conf/jevfleet.toml, or $JEV_CONFIG)")
    for f in fields(Settings):
        kind = {"int": int, "float": float}.get(f.type, str)
        parser.add_argument("--" + f.name.replace("_", "-"), dest=f.name, type=kind, default=None,
                            help=HELP[f.name] + f"  [env JEV_{f.name.upper()}]")


def _settings(args: argparse.Namespace) -> Settings:
    overrides = {f.name: getattr(args, f.name) for f in fields(Settings)}
    return load_settings(overrides, config_file=args.config)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="jevfleet", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="run gateway and workers under supervisord (foreground)")
    gateway = sub.add_parser("gateway", help="run the HTTP gateway")
    worker = sub.add_parser("worker", help="run one worker process")
    worker.add_argument("--index", type=int, default=0, help="process number; picks the default core set")
    worker.add_argument("--cores", default="", help="explicit core set, e.g. 2-3 or 0,2")
    worker.add_argument("--id", default="", help="worker id (default <hostname>/w<index>)")
    decide = sub.add_parser("decide", help="answer request files in this process (no server)")
    decide.add_argument("request", nargs="?", type=Path, help="a request body (JSON file)")
    decide.add_argument("--jsonl", type=Path, help="a file of request bodies, one per line")
    decide.add_argument("--output", type=Path, help="where answers go (never overwritten; "
                        "with --jsonl: appended to, resuming after the lines already there)")
    evaluate = sub.add_parser("eval", help="score answers on a labeled set: accuracy, Brier, ECE, reliability PNG")
    evaluate.add_argument("--set", dest="set_path", required=True, help="labeled JSONL set, e.g. eval/yesno.jsonl")
    evaluate.add_argument("--url", default="", help="ask a running server (e.g. http://127.0.0.1:8017) "
                                                    "instead of loading --profile in-process")
    evaluate.add_argument("--split", default="", help="only items of this split (fit or test; default all)")
    evaluate.add_argument("--out", default="eval-report", help="report directory (default ./eval-report)")
    calibrate = sub.add_parser("calibrate", help="fit the profile's [calibration] scale/bias on the fit half")
    calibrate.add_argument("--set", dest="set_path", default="eval/yesno.jsonl",
                           help="labeled yes/no JSONL set with fit/test splits (default eval/yesno.jsonl)")
    calibrate.add_argument("--out", default="", help="also write before/after reports into this directory")
    calibrate.add_argument("--dry-run", action="store_true", help="report only; leave the profile unchanged")
    for p in (serve, gateway, worker, decide, evaluate, calibrate):
        _add_settings_flags(p)
    lb = sub.add_parser("haproxy-conf", help="print the HAProxy configuration for several gateways (conf/haproxy.cfg)")
    lb.add_argument("gateways", nargs="+", help="each gateway's HTTP address, ADDR:PORT")
    lb.add_argument("--bind", default="0.0.0.0:8017", help="where HAProxy listens (default 0.0.0.0:8017)")
    lb.add_argument("--stats-socket", default="/run/haproxy/jevfleet.sock", help="HAProxy's admin socket")
    _add_settings_flags(lb)
    keys = sub.add_parser("keys", help="create CURVE keys for gateway and workers on other hosts")
    keys.add_argument("directory", type=Path, help="where to write gateway.key(_secret) and workers/")
    keys.add_argument("--workers", type=int, default=1, help="worker key pairs to create (default 1)")
    return parser


def _keys(directory: Path, workers: int) -> int:
    from shared.curve import make_keys

    for path in make_keys(directory, workers):
        print(path)
    w = directory / "workers"
    print(f"gateway: --curve-key {directory / 'gateway.key_secret'} --curve-clients {w}\n"
          f"worker:  --curve-key {w / 'worker-00.key_secret'} --curve-server-key {directory / 'gateway.key'}\n"
          "(copy gateway.key and one worker-NN.key_secret to each worker host)")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "keys":
        return _keys(args.directory, args.workers)
    settings = _settings(args)
    from shared.curve import CurveError

    if args.command == "haproxy-conf":
        from jevfleet.haproxy import render_haproxy_conf

        print(render_haproxy_conf(settings, args.gateways, bind=args.bind, stats_socket=args.stats_socket), end="")
        return 0
    if args.command in ("eval", "calibrate"):
        try:
            from quality import commands
        except ModuleNotFoundError as exc:  # the plot's matplotlib is the `quality` extra
            if exc.name != "matplotlib":
                raise
            print(f"jevfleet {args.command} draws with matplotlib: pip install -e '.[quality]'", file=sys.stderr)
            return 2
        if args.command == "eval":
            return commands.run_eval(settings, set_path=args.set_path, url=args.url, split=args.split, out=args.out)
        return commands.run_calibrate(settings, set_path=args.set_path, out=args.out, dry_run=args.dry_run)
    if args.command == "decide":
        from jevfleet.decide import decide_file, decide_jsonl

        if (args.request is None) == (args.jsonl is None):
            parser.error("decide takes either REQUEST.json or --jsonl IN.jsonl --output OUT.jsonl")
        if args.jsonl is not None:
            if args.output is None:
                parser.error("--jsonl needs --output")
            return decide_jsonl(settings, args.jsonl, args.output)
        return decide_file(settings, args.request, args.output)
    try:
        if args.command == "serve":
            from jevfleet.supervise import serve

            return serve(settings)
        if args.command == "gateway":
            from gateway.app import run_gateway_process

            return run_gateway_process(settings)
        from worker.process import run_worker_process

        return run_worker_process(settings, index=args.index, cores=args.cores, worker_id=args.id)
    except CurveError as exc:  # a setup mistake: say so, exit non-zero, no traceback
        print(f"jevfleet {args.command}: {exc}", file=sys.stderr)
        return 2
