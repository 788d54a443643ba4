"""worker/model_thread.py: loading and serving happen on one thread, and a failed load is told
to the waiting thread instead of leaving it blocked."""
from __future__ import annotations

import threading

import pytest

from worker.model_thread import ModelThread


def test_load_and_serve_run_on_the_same_thread_and_the_loaded_value_is_handed_over():
    seen: dict[str, int] = {}
    served = threading.Event()

    def load() -> str:
        seen["load"] = threading.get_ident()
        return "engine"

    def serve(value: str) -> None:
        seen["serve"] = threading.get_ident()
        seen["value"] = value
        served.set()

    thread = ModelThread(load, serve)
    thread.start()
    assert thread.wait_loaded() == "engine"
    assert served.wait(10)
    thread.join(10)
    assert seen["load"] == seen["serve"] == thread.ident != threading.get_ident()
    assert seen["value"] == "engine"


def test_a_failed_load_raises_in_the_waiting_thread_and_never_serves(monkeypatch):
    reported = []
    monkeypatch.setattr(threading, "excepthook", reported.append)  # a traceback the thread would print
    served = []

    def load() -> str:
        raise OSError("no such model")

    thread = ModelThread(load, served.append)
    thread.start()
    with pytest.raises(RuntimeError, match="no such model"):
        thread.wait_loaded()
    thread.join(10)
    assert served == [] and not thread.is_alive() and reported == []
