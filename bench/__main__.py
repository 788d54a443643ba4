"""The benchmarks, behind one entry point:

    python -m bench                 # the list
    python -m bench NAME [options]  # one of them; `make bench NAME=floor BENCH_ARGS="..."`

Each backs a figure the README or docs/benchmarks.md quotes. A run prints its tables and keeps
them, under a header giving the command, the date, the machine (CPU, cores, AVX-512 or not, the
llama.cpp build) and the load average before and after, in docs/benchmarks/NAME.md (the latest
run per model: a section each, so a run of another model adds its own instead of replacing the
default's; the sweep's rows and plot in docs/benchmarks/sweep/MODEL/; commit them with the
figures they back). Progress goes to stderr and is not kept.

Benchmarks only on a quiet machine: one at a time, nothing else running (no tests, no builds).
The model is the configured one (JEV_PROFILE, JEV_MODEL, or the default profile).
"""
from __future__ import annotations

import datetime
import importlib.util
import os
import platform
import re
import shlex
import subprocess
import sys
from pathlib import Path

from shared import llama_build
from shared.config import PROJECT_ROOT, load_settings

OUT = PROJECT_ROOT / "docs" / "benchmarks"
# name: (module, what it answers)
BENCHMARKS = {
    "floor": ("bench.floor", "first-seen requests one at a time: the engine alone, our fleet and llama-server, "
                             "taking turns; ratios to llama-server; where each one's time goes, by phase"),
    "sweep": ("loadtest.sweep", "throughput against latency at 1..N clients, workloads W1-W4 and first-seen, our "
                                "fleet (both modes) and the baselines, Locust as the client"),
    "consistency": ("bench.consistency", "the same first-seen requests at 1 and at 8 clients: bit-identical answers, "
                                         "largest move, flips across 0.5; ours and llama-server"),
    "repeats": ("bench.repeats", "the first requests of a workload sent again and again: what caches make faster"),
    "invariance": ("bench.invariance", "which micro-batch shapes keep a token row's logits bit-identical, per kernel"),
    "exact": ("bench.exact", "served margins against llama.cpp's most exact reading of the same tokens, path by path"),
    "readout": ("bench.readout", "which way of reading the answer ranks best, per split and tag"),
    "zoo": ("bench.zoo_serve", "each zoo file (make zoo) served as a user would, then beside llama-server"),
    "ceiling": ("bench.gateway_ceiling", "how many workers one gateway can feed: instant-answer workers, rising load"),
    "soak": ("bench.soak", "overload soak and refusal speed: a burst, 200 clients for 5 minutes, then normal load"),
}


SECTION = re.compile(r"^## model (.+)\n", re.M)  # a record's section per model


def served_model(*, short: bool = False) -> str:
    """The profile or model file the benchmark runs (JEV_PROFILE, JEV_MODEL, or the default);
    `short`: its file name without the .toml or .gguf, for a directory's name."""
    settings = load_settings()
    served = settings.profile or settings.model or settings.default_profile
    return Path(served).name.removesuffix(".toml").removesuffix(".gguf") if short else served


def machine() -> str:
    """CPU model, cores, AVX-512 or not, the llama.cpp build the venv holds."""
    cpuinfo = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    model = re.search(r"^model name\s*:\s*(.+)$", cpuinfo, re.M)
    avx512 = "AVX-512" if re.search(r"\bavx512f\b", cpuinfo) else "no AVX-512"
    return (f"{model[1].strip() if model else platform.processor()}, {os.cpu_count()} cores, {avx512}; "
            f"llama.cpp build {llama_build.installed_level()}; Python {platform.python_version()}")


def keep(name: str, model: str, section: str) -> Path:
    """Write `section` as `model`'s part of NAME.md, the other models' parts left as they were (a
    record from before the parts were kept per model is replaced whole: git has it)."""
    path = OUT / f"{name}.md"
    parts = SECTION.split(path.read_text()) if path.is_file() else [""]
    kept = dict(zip(parts[1::2], parts[2::2]))
    kept[model] = section
    OUT.mkdir(parents=True, exist_ok=True)
    path.write_text(f"# {name}: {BENCHMARKS[name][1]}\n\n"
                    + "\n".join(f"## model {m}\n{text.rstrip()}\n" for m, text in sorted(kept.items())))
    return path


def load() -> str:
    return " / ".join(f"{x:.2f}" for x in os.getloadavg())


def listing() -> str:
    width = max(map(len, BENCHMARKS))
    return "\n".join(f"  {name:<{width}}  {what}" for name, (_, what) in BENCHMARKS.items())


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__.split("\n\n")[0] + "\n\n" + listing())
        return 0 if argv else 2
    name, args = argv[0], argv[1:]
    if name not in BENCHMARKS:
        print(f"bench: no benchmark {name!r}; one of:\n{listing()}", file=sys.stderr)
        return 2
    module = BENCHMARKS[name][0]
    if importlib.util.find_spec(module) is None:  # a slip in the table fails here, not after a long set-up
        print(f"bench: {name}'s module {module} is missing", file=sys.stderr)
        return 2
    if name == "sweep" and "--out" not in args:  # its rows and plot, one directory per model
        args = [*args, "--out", str(OUT / "sweep" / served_model(short=True))]
    command = f"python -m bench {name} {shlex.join(args)}".strip()
    started, load_before = datetime.datetime.now(datetime.timezone.utc), load()
    proc = subprocess.Popen([sys.executable, "-m", module, *args], cwd=PROJECT_ROOT, stdout=subprocess.PIPE,
                            text=True, bufsize=1)
    lines = []
    for line in proc.stdout:
        sys.stdout.write(line)
        lines.append(line)
    code = proc.wait()
    if code == 0:
        path = keep(name, served_model(), f"\n`{command}`, {started:%Y-%m-%d %H:%M} UTC, on {machine()}; "
                                          f"load average {load_before} before, {load()} after.\n\n```\n{''.join(lines)}```\n")
        print(f"bench: kept in {path.relative_to(PROJECT_ROOT)}", file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
