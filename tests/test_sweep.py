"""loadtest.sweep: argument parsing, and one tiny real sweep against the session fleet."""
from __future__ import annotations

import argparse
import json
import subprocess
import sys

import pytest

from jevfleet.harness.fleet import Fleet
from loadtest.protocols import PROTOCOLS
from loadtest.sweep import (LOCUSTFILE, PROTOCOL_OF, TARGETS, USER_CLASS, can_run, durations, rounds, seconds,
                            settled, target_list, user_counts, workload_list)
from shared.config import PROJECT_ROOT


def test_every_target_has_a_protocol_and_a_locust_user_class():
    source = LOCUSTFILE.read_text()  # not imported: locust monkey-patches the process with gevent
    for target in TARGETS:
        protocol = PROTOCOL_OF[target]
        assert protocol in PROTOCOLS
        assert f"class {USER_CLASS[protocol]}(DecisionUser):\n    protocol = PROTOCOLS[{protocol!r}]" in source.replace('"', "'")


def test_durations_and_lists_parse_or_are_refused():
    assert [seconds(t) for t in ("60s", "2m", "1m30s", "45", "1h")] == [60, 120, 90, 45, 3600]
    assert user_counts("1,2, 4,16") == [1, 2, 4, 16]
    assert target_list("both") == ["jevfleet", "llama-cpp-python"]
    assert target_list("all") == ["jevfleet", "jevfleet-fast", "jevfleet-per-core", "jevfleet-big-cells",
                                  "llama-cpp-python", "llama-server"]
    assert target_list("llama-server,jevfleet,jevfleet") == ["llama-server", "jevfleet"]
    assert workload_list("W1,W3") == ["W1", "W3"]
    assert workload_list("W4") == ["W4"]
    assert durations("20s") == {"": 20} and durations("W4=1m") == {"": 60, "W4": 60}
    assert durations("20s, W4=60s") == {"": 20, "W4": 60}
    assert rounds("3") == 3
    for parse, bad in ((seconds, "60x"), (seconds, "s"), (user_counts, "1,0"), (user_counts, "a"),
                       (target_list, "vllm"), (workload_list, "W9"), (durations, "W9=20s"),
                       (durations, "20s,W4=x"), (rounds, "0"), (rounds, "x")):
        with pytest.raises(argparse.ArgumentTypeError):
            parse(bad)


def test_the_settle_probe_waits_out_sheds_as_the_server_asks_then_takes_the_answer():
    """A shed probe (the backlog filled the queue) is not the end of the backlog: retried after
    Retry-After until an answer, or the deadline."""
    replies = iter([(503, {"Retry-After": "3"}), (429, {}), (200, {})])
    waits: list[float] = []
    assert settled(lambda: next(replies), 600, waits.append) == 200
    assert waits == [3.0, 1.0]  # the server's Retry-After, then 1 s without one
    assert settled(lambda: (500, {}), 600, waits.append) == 500 and waits == [3.0, 1.0]  # not a shed: at once
    assert settled(lambda: (503, {"Retry-After": "2"}), 0, waits.append) == 503  # past the deadline: as it is


def test_w4_is_skipped_for_a_server_that_takes_one_prompt_per_call():
    assert can_run("jevfleet", "W4") and can_run("llama-server", "W4") and can_run("jevfleet-fast", "W4")
    assert not can_run("llama-cpp-python", "W4") and can_run("llama-cpp-python", "W3")


@pytest.mark.fleet
def test_a_one_user_sweep_writes_the_table_and_the_plot(fleet: Fleet, tmp_path):
    out = tmp_path / "sweep"
    proc = subprocess.run([sys.executable, "-m", "loadtest.sweep", "--host", fleet.url, "--users", "1",
                           "--duration", "4s,W4=5s", "--rounds", "2", "--warmup", "0", "--workload", "W1-fresh,W4", "--target", "jevfleet",
                           "--out", str(out)], cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    row, w4 = json.loads((out / "rows.json").read_text())
    assert (row["target"], row["workload"], row["users"], row["seconds"]) == ("jevfleet", "W1-fresh", 1, 8)
    assert (out / "logs" / "jevfleet-W1-fresh-u1-r2.json").is_file()  # the second round, pooled into the row
    assert row["answered"] >= 1 and row["errors"] == 0 and row["questions"] == row["answered"]
    assert row["queue_ms"] >= 0 and row["inference_ms"] > 0 and row["batch"] >= 1  # from the fleet's /metrics
    # W4: 20 questions a request (its 20th request, the 255-option choice, comes later than 8 s)
    assert w4["workload"] == "W4" and w4["seconds"] == 10 and w4["answered"] >= 1 and w4["errors"] == 0
    assert w4["questions"] == 20 * w4["answered"]
    table = (out / "results.md").read_text()
    assert "| jevfleet | W1-fresh | 1 |" in table and "| jevfleet | W4 | 1 |" in table and "L = λ·W" in table
    assert (out / "throughput_latency.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
