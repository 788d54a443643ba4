"""loadtest/fresh.py: workloads whose requests a sweep never sends twice, and the item ranges the
sweep hands its runs (no model, no server)."""
from __future__ import annotations

from collections import Counter
from types import SimpleNamespace

import pytest

from loadtest import fresh, workloads
from loadtest.sweep import Sweep

RUN = 3000  # requests of a long run: 20 s at 60 requests/s is 1,200


def run_items(name: str, start: int) -> list[workloads.Item]:
    return [fresh.item(name, start + k) for k in range(RUN)]


@pytest.mark.parametrize("name", ["W1-fresh", "W4-fresh"])
def test_every_request_asks_about_a_state_never_seen_in_its_run_or_another(name):
    first, second = run_items(name, 0), run_items(name, fresh.RUN_STRIDE)
    states = [item.state for item in first + second]
    assert len(set(states)) == len(states)
    assert fresh.item(name, 17) == fresh.item(name, 17)  # a pure function of (workload, index)
    assert all(it.questions == base.questions for it, base in zip(first, fresh.sample(name.replace("-fresh", ""))))


def test_w3_fresh_asks_each_new_state_its_twenty_questions_then_moves_on():
    items = run_items("W3-fresh", 0) + run_items("W3-fresh", fresh.RUN_STRIDE)
    asked = Counter(item.state for item in items)
    assert set(asked.values()) == {20}  # W3's 5 states × 20 questions, each pass's states new
    w3 = workloads.load("W3")
    assert [item.questions for item in items[:100]] == [item.questions for item in w3]


def test_a_fresh_state_is_the_repeat_heavy_text_behind_a_reference_line():
    w1, item = workloads.load("W1")[3], fresh.item("W1-fresh", 3)
    assert item.state.endswith(" " + w1.state) and item.state.startswith("Case ")


def test_the_reference_line_has_one_width_in_every_run_so_runs_read_the_same_lengths():
    """Its number used to grow with the run ("Case 48213-7:" in the first, "Case 48213-1000007:"
    in the second): four more of Gemma's one-digit tokens for every request of later runs."""
    lines = {fresh.item("W1-fresh", slot * fresh.RUN_STRIDE + k).state.split(" ", 2)[1]
             for slot in (0, 1, 37, 99) for k in (0, 7, 1234)}
    assert {len(line) for line in lines} == {fresh.MARK_DIGITS + 1} and len(lines) == 12
    with pytest.raises(ValueError, match="out of range"):
        fresh.item("W1-fresh", 10**fresh.MARK_DIGITS)


def test_repeats_never_ask_about_a_state_w1_fresh_asks_about():
    """Both put W1's texts behind a reference line; a sweep's W1-fresh runs never reach the repeats' numbers."""
    w1_fresh = {fresh.item("W1-fresh", slot * fresh.RUN_STRIDE + k).state for slot in range(0, 100, 9)
                for k in range(RUN)}
    assert not w1_fresh & {item.state for item in run_items("repeats", 0)}


def test_repeats_return_to_a_zipf_pool_of_states_at_the_stated_share():
    items = run_items("repeats", 0)
    assert len({item.state for item in items}) <= fresh.REPEAT_POOL
    share = fresh.returning_share(RUN)
    assert share == 1 - len({item.state for item in items}) / RUN
    assert 0.5 < share < 0.9 and fresh.returning_share(RUN) == share


def test_every_round_of_a_sweep_gets_its_own_range_of_items():
    sweep = SimpleNamespace(slots=0)
    starts = [Sweep.next_start(sweep) for _ in range(4)]
    assert starts == [0, fresh.RUN_STRIDE, 2 * fresh.RUN_STRIDE, 3 * fresh.RUN_STRIDE]


def test_every_workload_name_is_known_to_the_sweep_and_unknown_ones_are_refused():
    assert set(fresh.FRESH) < set(fresh.names()) and "W4" in fresh.names()
    with pytest.raises(ValueError, match="unknown fresh workload"):
        fresh.item("W9-fresh", 0)
