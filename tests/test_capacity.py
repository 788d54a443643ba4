"""Backpressure decisions: queue bounds, refusals, Retry-After estimates and the measured token rate."""
from __future__ import annotations

from dataclasses import dataclass

from gateway.capacity import NO_WORKER_RETRY_S, Limits, TokenRate, fits, full, refusal, retry_after_s, seconds_until_room

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


def test_with_no_worker_up_retry_after_is_the_restart_time():
    assert retry_after_s([], 10, LIMITS) == NO_WORKER_RETRY_S


def test_a_refusal_is_503_with_no_worker_up_and_429_when_every_queue_is_full():
    none = refusal([], 10, LIMITS)
    assert (none.status, none.retry_after) == (503, NO_WORKER_RETRY_S)
    busy = refusal([Q(1000, 4)], 100, LIMITS)
    assert (busy.status, busy.retry_after) == (429, 3)  # one 250-token request to finish at 100/s: 2.5 s, rounded up
    assert str(busy) == "every worker's queue is full"


def test_full_means_workers_up_but_no_place_left_or_every_free_place_reserved():
    assert not full([], LIMITS)  # no worker: not a 429 (the request path answers 503)
    assert full([Q(1000, 4), Q(10, 4)], LIMITS)  # both at the request bound
    assert not full([Q(1000, 4), Q(10, 1)], LIMITS)
    assert not full([Q(10, 1)], LIMITS, reserved=2)  # 3 places free, 2 spoken for
    assert full([Q(10, 1)], LIMITS, reserved=3)


def test_token_rate_starts_from_the_core_count_and_follows_measurements():
    rate = TokenRate(cores=2)
    assert rate.value == 400
    for _ in range(30):
        rate.add(1000, 1.0)
    assert 990 < rate.value <= 1000
    rate.add(0, 0.0)  # an empty batch teaches nothing
    assert 990 < rate.value <= 1000
