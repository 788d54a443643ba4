"""The routing policy on stand-in workers: least queued tokens, prefix affinity and its limit."""
from __future__ import annotations

from dataclasses import dataclass, field, replace

from gateway.capacity import Limits
from gateway.routing import PrefixMemory, Work, choose

LIMITS = Limits(queue_tokens=4096, queue_requests=32, affinity_slack_tokens=384)


@dataclass(eq=False)
class W:
    name: str
    queued_tokens: int = 0
    queued_requests: int = 0
    routable: bool = True
    last_sent: float = 0.0
    keys: set[str] = field(default_factory=set)
    reads: int | None = None  # tokens to read for its queue; default: as many as queued

    @property
    def queued_reads(self) -> int:
        return self.queued_tokens if self.reads is None else self.reads

    def holds(self, key: str) -> bool:
        return key in self.keys


def pick(workers, key="k", tokens=100, warm=None, **kw):
    work = Work(key=key, prompt=tokens, cold=tokens, warm=tokens if warm is None else warm)
    chosen = choose(workers, work, limits=kw.pop("limits", LIMITS), **kw)
    return chosen.name if chosen else None


def test_the_worker_with_fewest_queued_tokens_wins():
    assert pick([W("a", 500, 2), W("b", 200, 3), W("c", 900, 1)]) == "b"


def test_equally_loaded_workers_take_turns_by_last_send():
    assert pick([W("a", last_sent=5.0), W("b", last_sent=3.0)]) == "b"


def test_down_draining_and_excluded_workers_get_nothing():
    a, b, c = W("a", routable=False), W("b"), W("c", 900, 1)
    assert pick([a, b, c], exclude=[b]) == "c"
    assert pick([a], exclude=[]) is None


def test_a_holder_of_the_state_wins_while_its_queue_is_not_much_longer():
    idle, holder = W("idle"), W("holder", 384, 2, keys={"k"})
    assert pick([idle, holder]) == "holder"  # exactly the slack: still the holder


def test_affinity_yields_when_the_holder_is_much_more_loaded():
    idle, holder = W("idle"), W("holder", 385, 2, keys={"k"})
    assert pick([idle, holder]) == "idle"
    assert pick([idle, holder], limits=replace(LIMITS, affinity_slack_tokens=1000)) == "holder"


def test_the_least_loaded_of_several_holders_wins():
    assert pick([W("a", 300, 1, keys={"k"}), W("b", 100, 1, keys={"k"}), W("c")]) == "b"


def test_full_workers_are_skipped_unless_limits_are_ignored():
    full = W("full", 4000, 5, keys={"k"})
    assert pick([full], tokens=200) is None
    assert pick([full], tokens=200, ignore_limits=True) == "full"
    assert pick([full, W("other", 3000, 5)], tokens=200) == "other"


def test_affinity_never_overrides_the_queue_limit():
    assert pick([W("holder", 4000, 1, keys={"k"}), W("b", 3900, 1)], tokens=150) == "b"


def test_the_queue_bound_counts_tokens_to_read_and_a_holder_reads_only_the_questions():
    assert pick([W("holder", 9000, 1, reads=4000, keys={"k"})], tokens=500, warm=20) == "holder"  # 4020 <= 4096
    assert pick([W("other", 9000, 1, reads=4000)], tokens=500, warm=20) is None  # 4500 > 4096


def test_repeated_states_stick_to_one_worker_and_new_states_spread():
    """A small simulation: requests arrive one at a time into idle workers; each send is
    remembered the way the Fleet does."""
    workers = [W("a"), W("b")]
    memories = {w.name: PrefixMemory(16) for w in workers}
    for w in workers:
        w.holds = memories[w.name].__contains__
    where: dict[str, set[str]] = {}
    for clock, state in enumerate(["s1", "s2", "s3"] * 4):
        w = choose(workers, Work(key=state, prompt=300, cold=100, warm=10), limits=LIMITS)
        memories[w.name].touch(state)
        w.last_sent = float(clock + 1)
        where.setdefault(state, set()).add(w.name)
    assert all(len(names) == 1 for names in where.values()), where
    assert where["s1"] != where["s2"]  # distinct states spread over the idle workers


def test_prefix_memory_forgets_the_least_recently_sent():
    m = PrefixMemory(2)
    m.touch("x"); m.touch("y"); m.touch("x"); m.touch("z")
    assert "x" in m and "z" in m and "y" not in m and len(m) == 2
