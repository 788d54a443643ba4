"""Arithmetic as a serving fact (gateway/admission.py, shared/serving.with_arithmetic): the fleet's
is pinned or the first member's, a worker whose probe answer has other bits is refused with both
builds named; and a real worker on another llama.cpp build (x86-64-v2, no AVX: other kernels) is
refused by a real fleet and answers nothing, while one of the fleet's build joins."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from gateway.admission import Admission
from jevfleet.harness.fleet import CHECKED, start_fleet
from jevfleet.harness.load import by_id, decision, post, served_by, states
from shared import llama_build
from shared.config import PROJECT_ROOT
from shared.messages import Ready
from shared.serving import with_arithmetic

GATEWAY = {"model_sha256": "a" * 64, "profile": "p:1", "mode": "deterministic", "tokens": "k"}
V3 = with_arithmetic(GATEWAY, arithmetic="1111", llama_build="llama-cpp-python 0.3.36 x86-64-v3, libggml-cpu aa")
V2 = with_arithmetic(GATEWAY, arithmetic="2222", llama_build="llama-cpp-python 0.3.36 x86-64-v2, libggml-cpu bb")
ODD_LEVEL = "x86-64-v2"  # SSE4.2 and no AVX: other kernels than the default build's, on any x86-64 CPU


def ready(worker_id: str, pid: int, serves: dict) -> Ready:
    return Ready(worker_id=worker_id, pid=pid, cores=[0], serves=serves)


def test_the_first_worker_admitted_sets_the_arithmetic_and_one_that_differs_is_refused_naming_both_builds():
    admission = Admission(GATEWAY)
    assert admission.arithmetic == ""
    assert admission.admits(ready("w0", 1, V3))
    assert (admission.arithmetic, admission.arithmetic_from) == ("1111", f"worker w0, {V3['llama_build']}")
    assert not admission.admits(ready("w1", 2, V2))
    (refused,) = admission.describe(forget_after_s=60)
    assert refused["id"] == "w1" and refused["state"] == "refused"
    assert "arithmetic differs" in refused["reason"] and "x86-64-v2" in refused["reason"]
    assert "x86-64-v3" in refused["reason"] and "2222" in refused["reason"] and "1111" in refused["reason"]
    assert admission.admits(ready("w2", 3, V3))  # the fleet's bits: admitted


def test_a_pinned_arithmetic_refuses_even_the_first_worker_and_a_worker_that_states_none():
    admission = Admission(GATEWAY, arithmetic="2222")
    assert not admission.admits(ready("w0", 1, V3))
    assert "the fleet_arithmetic setting" in admission.describe(forget_after_s=60)[0]["reason"]
    assert not admission.admits(ready("w1", 2, GATEWAY))
    assert admission.admits(ready("w2", 3, V2)) and admission.arithmetic == "2222"


def test_a_refusal_for_other_facts_comes_before_the_arithmetic_and_sets_nothing():
    admission = Admission(GATEWAY)
    assert not admission.admits(ready("w0", 1, {**V3, "mode": "fast"}))
    assert admission.arithmetic == ""


@pytest.mark.fleet
@pytest.mark.timeout(1500)  # on an empty cache: the libraries' build (~2.5 min) and the worker's first canary
def test_a_worker_on_another_llama_cpp_build_is_refused_and_answers_nothing_and_one_of_the_fleets_joins(tmp_path):
    odd_libs = llama_build.libs(ODD_LEVEL)  # built by `make test` before the tiers; kept in the cache dir
    fleet = start_fleet(tmp_path, workers=1, extra=CHECKED)  # its own: the shared fleet lists one worker
    try:
        check_refused_then_joined(fleet, odd_libs)
    finally:
        code = fleet.stop()
    assert code == 0, fleet.logs()


def check_refused_then_joined(fleet, odd_libs) -> None:
    """A worker on odd_libs is refused and answers nothing; then one of the fleet's build joins."""
    def worker(worker_id: str, env: dict[str, str]) -> subprocess.Popen:
        cmd = [sys.executable, "-m", "jevfleet", "worker", "--id", worker_id, "--index", "1", "--run-dir",
               str(fleet.run_dir), "--port", str(fleet.port), "--cores-per-worker", "2", "--pin-workers", "0"]
        with open(fleet.run_dir / f"{worker_id}.log", "w") as log:
            return subprocess.Popen(cmd, cwd=PROJECT_ROOT, stdout=log, stderr=subprocess.STDOUT,
                                    env={**os.environ, **env})

    odd = worker("odd-build", {"LLAMA_CPP_LIB_PATH": str(odd_libs)})
    try:
        health = fleet.wait_for(lambda h: any(r["id"] == "odd-build" for r in h.get("refused_workers", [])),
                                "the other build refused", timeout=900)
        (refused,) = [r for r in health["refused_workers"] if r["id"] == "odd-build"]
        assert refused["pid"] == odd.pid and "arithmetic differs" in refused["reason"], refused
        assert ODD_LEVEL in refused["reason"] and llama_build.DEFAULT_LEVEL in refused["reason"], refused
        assert health["fleet"]["arithmetic"] in refused["reason"]
        assert "odd-build" not in by_id(health) and health["status"] == "ready"
        before = served_by(fleet)
        assert [post(fleet.url, decision(s)).status for s in states(4, tag="odd build ")] == [200] * 4
        after = served_by(fleet)
        assert "odd-build" not in after and sum(after.values()) - sum(before.values()) == 4
        gateway_log = (fleet.run_dir / "gateway.log").read_text()
        assert "refused worker odd-build" in gateway_log and ODD_LEVEL in gateway_log
    finally:
        odd.terminate()
        odd.wait(timeout=60)
    same = worker("same-build", {})
    try:
        health = fleet.wait_for(lambda h: by_id(h).get("same-build", {}).get("state") == "up", "same build up",
                                timeout=300)
        assert not any(r["id"] == "same-build" for r in health.get("refused_workers", []))
    finally:
        same.terminate()
        assert same.wait(timeout=60) == 0
