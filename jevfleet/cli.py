"""The `jevfleet` command: serve (the whole fleet, or one role of it, under supervisord), gateway,
worker, keys, haproxy-conf, decide, profile (derived from a GGUF), and the answer-quality tools eval
and calibrate (quality/).

Every setting (shared/config.py) is also a flag of every subcommand (--batch-tokens for
batch_tokens ...), generated with its type and help from the settings model.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Literal, Sequence, get_args, get_origin

from shared.config import (CONFIG_ENV, DEFAULT_CONFIG, PROJECT_ROOT, Settings, SettingsError, default_text, env_var,
                           load_settings)
from shared.profiles import HEAD_CHOICES

# Every labelled set (eval/README.md): hand-written, templated same-words pairs, plain decisions.
QUALITY_SETS = ("eval/yesno.jsonl", "eval/generated.jsonl", "eval/choice_score.jsonl", "eval/plain.jsonl")


def _add_settings_flags(parser: argparse.ArgumentParser) -> None:
    """A flag per field of Settings, its type, choices and help taken from the field."""
    parser.add_argument("--config", help=f"TOML settings file (default {DEFAULT_CONFIG.relative_to(PROJECT_ROOT)})"
                                         f"  [env {CONFIG_ENV}]")
    for name, field in Settings.model_fields.items():
        choices = get_args(field.annotation) if get_origin(field.annotation) is Literal else None
        described = f"{field.description}; default {default_text(name)}  [env {env_var(name)}]"
        parser.add_argument("--" + name.replace("_", "-"), dest=name, default=None, choices=choices,
                            type=str if choices else field.annotation, help=described.replace("%", "%%"))


def _settings(args: argparse.Namespace) -> Settings:
    if args.config:  # through the environment, so that the processes serve starts read it too
        os.environ[CONFIG_ENV] = args.config
    return load_settings({name: getattr(args, name) for name in Settings.model_fields})


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
    evaluate.add_argument("--set", dest="set_path", nargs="+", default=list(QUALITY_SETS),
                          help="labeled JSONL set(s), e.g. eval/yesno.jsonl eval/generated.jsonl (default: every "
                               "set in eval/)")
    evaluate.add_argument("--url", default="", help="ask a running server (e.g. http://127.0.0.1:8017) "
                                                    "instead of loading --profile in-process")
    evaluate.add_argument("--split", default="", help="only items of this split (fit or test; default all)")
    evaluate.add_argument("--out", default="eval-report", help="report directory (default ./eval-report)")
    evaluate.add_argument("--head", choices=tuple(HEAD_CHOICES), default="profile",
                          help="in-process: the profile's learned head as its [head] says, or on / off")
    evaluate.add_argument("--reading", choices=("served", "plain"), default="served",
                          help="served: the answers jevfleet gives; plain: for comparison, the reading a "
                               "llama-server user would write (one chat turn, P(yes) of the first token; "
                               "yes/no items only, quality/plain.py)")
    calibrate = sub.add_parser("calibrate", help="fit the profile's [calibration] scale/bias on the fit half")
    calibrate.add_argument("--set", dest="set_path", nargs="+", default=list(QUALITY_SETS),
                           help="labeled JSONL set(s) with fit/test splits; their yes/no items are used "
                                "(default: every set in eval/)")
    calibrate.add_argument("--tag", default="", help="fit on the items of this tag (straightforward, adversarial "
                           "or all; default straightforward where the set has such items, else all)")
    calibrate.add_argument("--out", default="", help="also write before/after reports into this directory")
    calibrate.add_argument("--dry-run", action="store_true", help="report only; leave the profile unchanged")
    calibrate.add_argument("--head", action="store_true", help="fit the learned yes/no head instead "
                           "(worker/head.py): <profile>.head.npz and the profile's [head] section")
    for p in (serve, gateway, worker, decide, evaluate, calibrate):
        _add_settings_flags(p)
    derive = sub.add_parser("profile", help="print the profile derived from a GGUF file (what serve --model uses "
                                            "without --profile) as TOML, for editing and --profile FILE.toml")
    derive.add_argument("gguf", type=Path, help="the model file")
    lb = sub.add_parser("haproxy-conf", help="print the HAProxy configuration for several gateways (conf/haproxy.cfg)")
    lb.add_argument("gateways", nargs="+", help="each gateway's HTTP address, ADDR:PORT")
    lb.add_argument("--bind", default="0.0.0.0:8017", help="where HAProxy listens (default 0.0.0.0:8017)")
    lb.add_argument("--stats-socket", default="/run/haproxy/jevfleet.sock", help="HAProxy's admin socket")
    lb.add_argument("--discover", type=int, default=0, metavar="N", help="the one gateway given is a DNS name "
                    "(a headless Service) resolved every second into up to N servers")
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


def _profile(gguf: Path) -> int:
    from shared.derive import derive_data
    from shared.profile_file import profile_toml
    from shared.profiles import ProfileError

    try:
        data = derive_data(gguf)
    except ProfileError as exc:
        print(f"jevfleet profile: {exc}", file=sys.stderr)
        return 2
    print(profile_toml(data, f"Derived from {gguf.name} by `jevfleet profile` (shared/derive.py): what `jevfleet "
                             "serve --model` serves\nwithout a profile. Edit it, then serve it with --profile "
                             "FILE.toml and fit its [calibration]\nwith `jevfleet calibrate --profile FILE.toml`."),
          end="")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "keys":
        return _keys(args.directory, args.workers)
    if args.command == "profile":
        return _profile(args.gguf)
    try:
        settings = _settings(args)
    except SettingsError as exc:  # a mistyped value: say which, exit 2 like argparse, no traceback
        print(f"jevfleet {args.command}: {exc}", file=sys.stderr)
        return 2
    from shared.curve import CurveError
    from shared.profiles import ProfileError

    try:
        return _run(parser, args, settings)
    except (CurveError, ProfileError) as exc:  # a setup mistake: say so, exit non-zero, no traceback
        print(f"jevfleet {args.command}: {exc}", file=sys.stderr)
        return 2


def _run(parser: argparse.ArgumentParser, args: argparse.Namespace, settings: Settings) -> int:
    """The command, once its settings are valid."""
    if args.command == "haproxy-conf":
        from jevfleet.haproxy import render_haproxy_conf

        print(render_haproxy_conf(settings, args.gateways, bind=args.bind, stats_socket=args.stats_socket,
                                  discover=args.discover), end="")
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
            return commands.run_eval(settings, set_path=args.set_path, url=args.url, split=args.split, out=args.out,
                                     reading=args.reading,
                                     head=args.head)
        return commands.run_calibrate(settings, set_path=args.set_path, out=args.out, dry_run=args.dry_run,
                                      head=args.head, tag=args.tag)
    if args.command == "decide":
        from jevfleet.decide import decide_file, decide_jsonl

        if (args.request is None) == (args.jsonl is None):
            parser.error("decide takes either REQUEST.json or --jsonl IN.jsonl --output OUT.jsonl")
        if args.jsonl is not None:
            if args.output is None:
                parser.error("--jsonl needs --output")
            return decide_jsonl(settings, args.jsonl, args.output)
        return decide_file(settings, args.request, args.output)
    if args.command == "serve":
        from jevfleet.supervise import serve

        return serve(settings)
    if args.command == "gateway":
        from gateway.app import run_gateway_process

        return run_gateway_process(settings)
    from worker.process import run_worker_process

    return run_worker_process(settings, index=args.index, cores=args.cores, worker_id=args.id)
