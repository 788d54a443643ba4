"""bench/floor.py's phase split: llama-server's own times read from its /completion answers (no
server; the bodies are shaped as llama-server's `timings`)."""
from __future__ import annotations

import pytest

from bench.floor import llama_server_phases, reference


def timings(prompt_ms: float, predicted_ms: float) -> dict:
    return {"content": " Yes", "timings": {"prompt_n": 70, "prompt_ms": prompt_ms, "predicted_n": 1,
                                           "predicted_ms": predicted_ms}}


def test_one_prompts_times_are_its_prompt_and_predicted_ms():
    assert llama_server_phases(timings(883.1, 0.02)) == {"server prompt": 883.1, "server predicted": 0.02}


def test_a_list_of_prompts_adds_up_each_answers_times():
    phases = llama_server_phases([timings(900.0, 0.5), timings(40.0, 0.5)])
    assert phases == {"server prompt": pytest.approx(940.0), "server predicted": pytest.approx(1.0)}


def test_each_target_is_measured_against_llama_server_on_the_same_kernels():
    every = ["floor", "jevfleet", "jevfleet-native", "llama-server", "llama-server-native"]
    assert [reference(t, every) for t in every] == [
        "llama-server", "llama-server", "llama-server-native", "llama-server", "llama-server-native"]
    assert reference("jevfleet-native", ["jevfleet-native", "llama-server"]) == "llama-server"
    assert reference("jevfleet", ["floor", "jevfleet"]) == "floor"
