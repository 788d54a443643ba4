"""jevfleet/watch.py: which of supervisord's processes refused at start, from what supervisord says
of them (getAllProcessInfo's fields) and the end of their logs."""
from __future__ import annotations

from jevfleet.watch import Refusal, refusals
from shared.refusal import MARK


def info(name: str, statename: str, exitstatus: int = 0, group: str = "worker", spawnerr: str = "") -> dict:
    return {"name": name, "group": group, "statename": statename, "exitstatus": exitstatus, "spawnerr": spawnerr}


LOGS = {"worker:worker_01": f"... loading\nTraceback ...\njevfleet worker h/w01: {MARK}start-up canary: no\n",
        "gateway": "Traceback ...\nRuntimeError: llama.cpp could not load /m\n"}


def test_only_an_exit_2_and_a_process_supervisord_gave_up_on_are_refusals():
    infos = [info("worker_00", "RUNNING"),
             info("worker_01", "EXITED", 2),
             info("worker_02", "EXITED", 0),  # drained after SIGTERM: not restarted, not a refusal
             info("worker_03", "EXITED", 1),  # crashed after it was up: supervisord starts it again
             info("worker_04", "STARTING"),
             info("worker_05", "FATAL", spawnerr="can't find command 'nope'"),
             info("gateway", "EXITED", 2, group="gateway")]
    assert refusals(infos, LOGS.__getitem__) == [
        Refusal("worker:worker_01", "start-up canary: no"),
        Refusal("worker:worker_05", "can't find command 'nope'"),
        Refusal("gateway", "RuntimeError: llama.cpp could not load /m")]  # no refusal line: its last line


def test_nothing_refused_reads_no_log():
    def no_log(process: str) -> str:
        raise AssertionError(f"read the log of {process}")

    assert refusals([info("worker_00", "RUNNING"), info("worker_01", "BACKOFF")], no_log) == []
