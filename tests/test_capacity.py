"""Queue bounds, Retry-After estimates and the measured token rate."""
from __future__ import annotations

from dataclasses import dataclass

from gateway.capacity import Limits, TokenRate, fits, retry_after_s, seconds_until_room

LIMITS = Limits(queue_tokens=1000, queue_requests=4, affinity_slack_tokens=0)


@dataclass
class Q:
    queued_reads: int
    queued_requests: int
    tokens_per_s: float = 100.0


def test_an_idle_worker_takes_a_request_of_any_length():
    assert fits(Q(0, 0), 50_000, LIMITS)


def test_tokens_and_requests_both_bound_a_queue():
    assert fits(Q(900, 1), 100, LIMITS) and not fits(Q(900, 1), 101, LIMITS)
    assert fits(Q(30, 3), 10, LIMITS) and not fits(Q(40, 4), 10, LIMITS)


def test_wait_is_the_excess_read_at_the_worker_rate():
    assert seconds_until_room(Q(900, 2), 300, LIMITS) == 2.0  # 200 tokens over, 100/s
    assert seconds_until_room(Q(400, 4), 10, LIMITS) == 1.0  # one request of 100 tokens to finish


def test_retry_after_is_whole_seconds_from_the_soonest_worker_never_zero():
    assert retry_after_s([Q(900, 2), Q(1000, 3, tokens_per_s=50)], 650, LIMITS) == 6  # 5.5 s → 6
    assert retry_after_s([Q(10, 1)], 10, LIMITS) == 1
    assert retry_after_s([Q(10**9, 1, tokens_per_s=1)], 10, LIMITS) == 60


def test_token_rate_starts_from_the_core_count_and_follows_measurements():
    rate = TokenRate(cores=2)
    assert rate.value == 400
    for _ in range(30):
        rate.add(1000, 1.0)
    assert 990 < rate.value <= 1000
    rate.add(0, 0.0)  # an empty batch teaches nothing
    assert 990 < rate.value <= 1000
