"""State snapshots: the LRU policy, its limits and longest-common-prefix matching on fake cells
that place tokens like llama.cpp does; then, on the real model, that an answer is bit-identical
whether its state came from a snapshot, a fresh read, alone or in a batch, across evictions."""
from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from client.net import post_json
from jevfleet.harness.engine import make_job, new_engine
from shared.messages import prefix_key
from shared.messages import common_prefix
from tests.fake_cells import FakeCells, OutOfOrder, run_batch
from tests.kv_layout import in_position_order
from worker.engine import Engine
from worker.snapshot_parts import Placement
from worker.snapshots import SnapshotCache

PREAMBLE = list(range(1000, 1040))  # 40 tokens every prompt starts with


def make_cache(cells: FakeCells, *, entries: int = 4, tokens: int = 400, pin: bool = True,
               second_miss: bool = False, spill: int = 0) -> SnapshotCache:
    """A cache on fake cells. Its LRU and limits are tested keeping a state on first sight, which
    says less; the default admission rule (on the second miss) and host memory (`spill`: cells
    it may hold) have tests of their own."""
    cache = SnapshotCache(cells, seqs=range(100, 100 + entries), max_entries=entries, max_tokens=tokens,
                          second_miss=second_miss, spill_bytes=spill)
    if pin:
        cells.place([(0, i, t) for i, t in enumerate(PREAMBLE)])
        cache.pin(PREAMBLE, 0)
        cells.remove(0)
    return cache


def state(k: int, length: int = 40, common: int = 0) -> list[int]:
    """Prefix of state k: the preamble, `common` tokens shared by all states, then its own."""
    return PREAMBLE + list(range(2000, 2000 + common)) + [10_000 * (k + 1) + i for i in range(length)]


@given(st.lists(st.integers(0, 3), max_size=40), st.lists(st.integers(0, 3), max_size=40))
def test_common_prefix_matches_a_plain_loop(a, b):
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    assert common_prefix(a, b) == n


def test_a_repeated_state_is_read_once_and_the_preamble_always_hits():
    cells = FakeCells(4000)
    cache = make_cache(cells)
    first = run_batch(cache, cells, [state(1)])
    assert first.reused == [len(PREAMBLE)]  # the pinned preamble, not counted as a state hit
    again = run_batch(cache, cells, [state(1)])
    assert again.reused == [len(state(1))] and again.reads == []
    s = cache.stats()
    assert (s.hits, s.misses, s.reused_tokens) == (1, 1, len(PREAMBLE) + len(state(1)))
    assert prefix_key(state(1)) in cache.keys and prefix_key(PREAMBLE) in cache.keys


def test_least_recently_used_is_evicted_and_the_preamble_never():
    cells = FakeCells(4000)
    cache = make_cache(cells, entries=3)  # the preamble and two states
    run_batch(cache, cells, [state(1)])
    run_batch(cache, cells, [state(2)])
    run_batch(cache, cells, [state(1)])  # touch 1: 2 is now the oldest
    run_batch(cache, cells, [state(3)])
    held = {tuple(e.tokens) for e in cache.entries}
    assert held == {tuple(PREAMBLE), tuple(state(1)), tuple(state(3))}


def test_token_limit_evicts_and_a_prefix_over_the_limit_is_not_kept():
    cells = FakeCells(4000)
    cache = make_cache(cells, entries=8, tokens=200)  # 40 preamble + two 80-token states
    for k in range(4):
        run_batch(cache, cells, [state(k)])
        assert cache.tokens <= 200
    assert len(cache.entries) == 3
    run_batch(cache, cells, [state(9, length=300)])
    assert all(len(e.tokens) < 300 for e in cache.entries)


def test_off_keeps_nothing_and_reads_everything():
    cells = FakeCells(4000)
    cache = make_cache(cells, entries=0, pin=False)
    plan = run_batch(cache, cells, [state(1)])
    plan = run_batch(cache, cells, [state(1)])
    assert plan.reused == [0] and cache.entries == [] and cells.used() == 0


def test_short_prefixes_are_not_kept():
    cells = FakeCells(1000)
    cache = make_cache(cells, pin=False)
    run_batch(cache, cells, [list(range(31))])
    assert cache.entries == []


def test_states_sharing_a_long_beginning_never_serve_each_other_wrongly():
    cells = FakeCells(4000)
    cache = make_cache(cells, entries=3, tokens=1000)
    a, b = state(1, length=20, common=100), state(2, length=20, common=100)
    run_batch(cache, cells, [a])
    plan = run_batch(cache, cells, [b])  # run_batch checks the working sequence holds exactly b
    assert plan.reused == [len(PREAMBLE) + 100]  # the common beginning came from a's snapshot
    run_batch(cache, cells, [state(3)])  # evicts a; b was made from a copy of a's cells
    run_batch(cache, cells, [state(4)])
    for p in (a, b, state(3), state(4), a):
        run_batch(cache, cells, [p])


def test_duplicate_prefixes_in_a_batch_are_read_once():
    cells = FakeCells(4000)
    cache = make_cache(cells)
    plan = run_batch(cache, cells, [state(1), state(2), state(1)])
    assert [seq for seq, _, _ in plan.reads] == [0, 1] and plan.copies == [(0, 2, len(state(1)))]
    assert cache.estimate(state(5), [state(5)]) == 0
    assert cache.estimate(state(5)) == len(state(5)) - len(PREAMBLE)
    assert cache.estimate(state(1)) == 0


def test_by_default_a_state_is_kept_on_its_second_miss_among_the_recent_ones():
    cells = FakeCells(4000)
    cache = make_cache(cells, entries=3, second_miss=True)  # the preamble, two states, three misses remembered
    run_batch(cache, cells, [state(1), state(1)])  # the same state twice in a batch: one miss
    assert len(cache.entries) == 1
    run_batch(cache, cells, [state(1)])  # missed again: kept
    assert prefix_key(state(1)) in cache.keys
    assert run_batch(cache, cells, [state(1)]).reads == []
    for k in (2, 3, 4, 5, 2):  # three other misses come between 2's first and second miss
        run_batch(cache, cells, [state(k)])
    assert cache.keys == (prefix_key(PREAMBLE), prefix_key(state(1)))
    run_batch(cache, cells, [state(5)])  # 5 was missed two batches ago: kept
    assert prefix_key(state(5)) in cache.keys
    cache.clear()  # forgets the misses too
    run_batch(cache, cells, [state(4)])
    assert len(cache.entries) == 1
    s = cache.stats()
    assert (s.hits, s.misses) == (1, 9)


def test_a_snapshot_unused_for_long_is_evicted_though_there_is_room():
    """Kept cells slow every read, so a state that stopped coming back does not stay for good."""
    cells = FakeCells(4000)
    cache = make_cache(cells, entries=2, second_miss=True)  # stale after STALE_USES x 2 = 8 lookups
    for _ in range(3):  # a miss, a miss that keeps it, a hit
        run_batch(cache, cells, [state(1)])
    for k in range(2, 11):  # 9 lookups of other states, each missed once: none is kept
        run_batch(cache, cells, [state(k)])
    assert prefix_key(state(1)) in cache.keys
    run_batch(cache, cells, [state(11)])  # more than 8 lookups since its last use: evicted first
    assert cache.keys == (prefix_key(PREAMBLE),) and cache.tokens == len(PREAMBLE)


def test_a_state_that_left_the_cells_comes_back_from_host_memory_unread():
    """Unkept and evicted prefixes are saved to host memory; a repeat is restored into cells
    instead of read (and the fake checks the restored cells stay in position order)."""
    cells = FakeCells(4000)
    cache = make_cache(cells, entries=2, second_miss=True, spill=1000)  # the preamble and one state
    run_batch(cache, cells, [state(1)])  # a first miss: not kept in cells, saved to host memory
    assert len(cache.entries) == 1 and prefix_key(state(1)) in cache.held_keys()
    plan = run_batch(cache, cells, [state(1)])
    assert plan.reads == [] and plan.reused == [len(state(1))]
    assert cells.used() == len(state(1))  # the restored state shares the preamble's cells
    run_batch(cache, cells, [state(2)])
    run_batch(cache, cells, [state(2)])  # restored; state 1 leaves the cells to make room
    assert {tuple(e.tokens) for e in cache.entries} == {tuple(PREAMBLE), tuple(state(2))}
    plan = run_batch(cache, cells, [state(1), state(3)])
    assert [(seq, start) for seq, start, _ in plan.reads] == [(1, len(PREAMBLE))]  # only state 3 is read
    s = cache.stats()
    assert (s.ram_hits, s.ram_kept, s.hits, s.misses) == (3, 3, 3, 3)
    cache.clear()
    assert cache.held_keys() == {prefix_key(PREAMBLE)} and cache.stats().ram_bytes == 0


def test_host_memory_keeps_to_its_budget_dropping_the_least_recently_used():
    cells = FakeCells(4000)
    cache = make_cache(cells, entries=2, second_miss=True, spill=100)  # two states fit (40 cells each
    for k in (1, 2, 3):                                                  # beyond the shared preamble)
        run_batch(cache, cells, [state(k)])
    assert cache.stats().ram_kept == 2 and cache.stats().ram_bytes == 2 * (len(state(1)) - len(PREAMBLE))
    assert prefix_key(state(1)) not in cache.held_keys()
    assert run_batch(cache, cells, [state(1)]).reads != []  # dropped: read again
    assert run_batch(cache, cells, [state(3)]).reads == []


def test_a_partial_match_is_used_only_while_its_sliding_window_is_held():
    cells = FakeCells(4000)
    cache = SnapshotCache(cells, seqs=range(100, 104), max_entries=4, max_tokens=2000, n_swa=64, second_miss=False)
    long_a = state(1, length=10, common=200)
    run_batch(cache, cells, [long_a])
    entry = cache.entries[0]
    other = state(2, length=10, common=200)  # shares the first 240 tokens of long_a
    assert cache.estimate(other) == 10
    cells.pos_floor[entry.seq] = 240 - 64 + 2  # llama.cpp dropped one position too many
    assert cache.estimate(other) == len(other)
    assert cache.estimate(long_a) == 0  # a full match never needs the dropped positions


def test_after_an_eviction_each_entry_moves_once_not_at_every_batch():
    """A relocation leaves the entries that were in place in place: batches that take turns
    using entries left out of order by one eviction move each of them once (this was a move
    at every batch, the W3-after-W1 slowdown of docs/benchmarks.md)."""
    cells = FakeCells(4000)
    cache = make_cache(cells, entries=4)  # the preamble and three states
    for k in (1, 2, 3, 4):  # state 4 evicts state 1: a new epoch, states 2-4 out of order
        run_batch(cache, cells, [state(k)])
    before = cache.stats().relocations
    for ks in ([2], [3], [2, 4], [3], [2], [4, 3], [2]):
        plan = run_batch(cache, cells, [state(k) for k in ks])  # the fake raises OutOfOrder if wrong
        assert plan.reads == []
    assert cache.stats().relocations - before == 3  # [2], [3], [2, 4]: each moved once


@pytest.mark.parametrize("failing", [1, 2], ids=["eviction", "relocation"])
def test_a_save_that_fails_leaves_no_entry_without_its_cells(failing):
    """A save that raises (llama.cpp out of memory) while a batch evicts or relocates must not
    leave an entry whose cells are gone: save takes the preamble's positions out first, and an
    entry coming from host memory in the same batch has no cells yet. Every entry left holds its
    prefix, and the next batch is served right."""
    cells = FakeCells(4000)
    cache = make_cache(cells, entries=4, spill=1000)  # the preamble and three states
    for k in (1, 2, 3, 4):  # state 4 evicts state 1 to host memory: states 2-4 out of order
        run_batch(cache, cells, [state(k)])
    real_save, calls = cells.save, []

    def save_failing_once(seq: int):
        calls.append(seq)
        if len(calls) == failing:  # 1: evicting state 3 to make room for state 1, 2: moving state 2
            raise RuntimeError("llama_state_seq_get_data failed")
        return real_save(seq)

    cells.save = save_failing_once
    with pytest.raises(RuntimeError):
        run_batch(cache, cells, [state(2), state(1)])
    for seq in range(2):
        cells.remove(seq)  # what the engine does with its working sequences after a failed batch
    for e in cache.entries:
        assert cells.tokens(e.seq) == e.tokens
    plan = run_batch(cache, cells, [state(2), state(1), state(3)])
    assert len(plan.reused) == 3 and all(cells.tokens(e.seq) == e.tokens for e in cache.entries)


@pytest.mark.parametrize("failing", ["save", "restore"])
def test_a_failed_move_forgets_the_entries_in_place_it_took_out_too(failing):
    """A relocation takes out every entry the batch uses, those that were in place too. If a
    save or a restore then raises, each of them whose cells are not back is forgotten, not left
    as an entry whose cells (or the preamble's positions in them) are gone."""
    cells = FakeCells(4000)
    cache = make_cache(cells, entries=4, spill=1000)
    for k in (1, 2, 3, 4):  # state 4 evicts state 1: states 2-4 out of order
        run_batch(cache, cells, [state(k)])
    run_batch(cache, cells, [state(2)])  # state 2 moved: in place; state 3 is not
    real, calls = getattr(cells, failing), []

    def failing_once(*args):
        calls.append(args)
        if len(calls) == (2 if failing == "save" else 1):  # saving state 3 / restoring state 2
            raise RuntimeError(f"llama_state_seq_{failing} failed")
        return real(*args)

    setattr(cells, failing, failing_once)
    with pytest.raises(RuntimeError):
        run_batch(cache, cells, [state(2), state(3)])
    for seq in range(2):
        cells.remove(seq)
    assert all(cells.tokens(e.seq) == e.tokens for e in cache.entries)
    assert {tuple(e.tokens) for e in cache.entries} == {tuple(PREAMBLE), tuple(state(4))}
    plan = run_batch(cache, cells, [state(2), state(3), state(4)])
    assert plan.reused[2] == len(state(4)) and all(cells.tokens(e.seq) == e.tokens for e in cache.entries)


def test_a_failed_eviction_leaves_no_entry_from_host_memory_without_its_cells():
    """Two states come back from host memory in one batch; making room for the second fails.
    The first, already an entry whose cells were still in its blob, must not stay as one."""
    cells = FakeCells(4000)
    cache = make_cache(cells, entries=3, spill=1000)  # the preamble and two states
    for k in (1, 2, 3, 4):  # states 1 and 2 go to host memory, 3 and 4 stay in cells
        run_batch(cache, cells, [state(k)])
    real_save = cells.save
    calls = []

    def save_failing_second(seq: int):
        calls.append(seq)
        if len(calls) == 2:  # evicting state 4 to make room for state 2
            raise RuntimeError("llama_state_seq_get_data failed")
        return real_save(seq)

    cells.save = save_failing_second
    with pytest.raises(RuntimeError):
        run_batch(cache, cells, [state(1), state(2)])
    for seq in range(2):
        cells.remove(seq)
    assert all(cells.tokens(e.seq) == e.tokens for e in cache.entries)
    cells.save = real_save
    plan = run_batch(cache, cells, [state(1), state(2)])
    assert plan.reads == [] and all(cells.tokens(e.seq) == e.tokens for e in cache.entries)


def test_a_state_in_host_memory_too_long_for_the_cells_evicts_nothing():
    """Making room for a state that cannot fit however many entries go evicts none of them."""
    cells = FakeCells(4000)
    cache = make_cache(cells, entries=4, tokens=200, second_miss=True, spill=1000)
    for _ in range(2):  # a miss, then the miss that keeps it
        run_batch(cache, cells, [state(1)])
    long = state(9, length=300)  # over the 200-token limit: to host memory, never into cells
    for _ in range(2):
        assert run_batch(cache, cells, [long]).reads != []
    assert cache.keys == (prefix_key(PREAMBLE), prefix_key(state(1)))
    assert run_batch(cache, cells, [state(1)]).reads == []


def test_out_of_order_placement_is_caught_by_the_fake():
    """The hazard the epochs exist for: without relocation, the suffix of a request whose
    snapshot lies above a hole would be placed below it."""
    cells = FakeCells(4000)
    cache = make_cache(cells, entries=3)

    def believe_in_place(movers):  # what the cache would do without relocation
        for e in movers:
            e.state = Placement.IN_CELLS

    cache._relocate = believe_in_place
    run_batch(cache, cells, [state(1)])
    run_batch(cache, cells, [state(2)])
    run_batch(cache, cells, [state(3)])  # evicts 1: a hole below 2
    with pytest.raises(OutOfOrder):
        run_batch(cache, cells, [state(2)])


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.tuples(st.integers(0, 7), st.sampled_from([0, 30, 120])),
                         min_size=1, max_size=4), min_size=1, max_size=25),
       st.integers(2, 6), st.sampled_from([150, 300, 600]), st.booleans(), st.sampled_from([0, 150, 1000]))
def test_random_traffic_keeps_limits_prefixes_and_cell_order(batches, entries, tokens, second_miss, spill):
    """Any interleaving of states (some sharing beginnings), batch mates, evictions and
    relocations: every working sequence holds its exact prefix, no token is ever appended below
    its sequence's cells, and the limits hold after every batch."""
    cells = FakeCells(2500)
    cache = make_cache(cells, entries=entries, tokens=tokens, second_miss=second_miss, spill=spill)
    for batch in batches:
        run_batch(cache, cells, [state(k % 4 + 1, length=10 + 5 * k, common=common) for k, common in batch])
        assert len(cache.entries) <= entries and cache.tokens <= tokens
        assert cache.tokens == sum(len(e.tokens) for e in cache.entries)
        for e in cache.entries:
            assert cells.tokens(e.seq) == e.tokens and cells.in_order(e.seq)
        assert cells.used() <= tokens  # snapshots hold at most their token budget in cells
        assert cache.spill.bytes <= spill


# --- the real model ----------------------------------------------------------------------------
STATES = {
    # two states sharing a long beginning, then diverging
    "late": "Order 5521 from Ines contains two green tents for Lisbon. The courier picked it up on Monday and "
            "the tracking page has not changed since; the customer now says the parcel is late.",
    "paid": "Order 5521 from Ines contains two green tents for Lisbon. The courier picked it up on Monday and "
            "the tracking page has not changed since; the customer has paid the invoice in full.",
    "crash": "Since the last update the mobile app closes itself whenever I open the settings page, and "
             "reinstalling it did not help at all.",
}
QUESTIONS = ["Is the parcel late?", "Has the customer paid?"]


@pytest.fixture(scope="module")
def fresh() -> Engine:
    """No snapshots at all: every prompt is read from its first token."""
    engine = new_engine(ctx=1024, state_cache=0)
    yield engine
    engine.close()


@pytest.fixture(scope="module")
def cached() -> Engine:
    """The preamble and two states fit: a third state evicts, and hits must relocate."""
    engine = new_engine(ctx=1024, state_cache=3, state_cache_tokens=900)
    yield engine
    engine.close()


def check_cache(engine: Engine) -> None:
    cache = engine.cache
    assert len(cache.entries) <= cache.max_entries and cache.tokens <= cache.max_tokens
    for e in cache.entries:
        assert in_position_order(engine, e.seq), f"snapshot {e.key} has cells out of position order"


@pytest.mark.model
def test_answers_are_bit_identical_fresh_cold_warm_alone_and_batched(fresh, cached):
    reference = {}
    for name, text in STATES.items():
        job = make_job(fresh, text, QUESTIONS)
        fresh.run([job])
        reference.update({(name, q): m for q, m in zip(QUESTIONS, job.margins)})
    rng = random.Random(4)
    names = list(STATES)
    batches = [[("late", QUESTIONS)], [("late", QUESTIONS[:1])], [("paid", QUESTIONS)]]
    batches += [[(rng.choice(names), rng.sample(QUESTIONS, rng.randint(1, 2))) for _ in range(rng.randint(1, 3))]
                for _ in range(6)]
    served_from_snapshot = 0
    for batch in batches:
        jobs = [make_job(cached, STATES[name], qs) for name, qs in batch]
        cached.run(jobs)
        for (name, qs), job in zip(batch, jobs):
            assert job.margins == [reference[(name, q)] for q in qs], (name, qs, job.reused)
            served_from_snapshot += job.reused > len(cached.cache.entries[0].tokens)
        check_cache(cached)
    stats = cached.cache.stats()
    assert served_from_snapshot >= 5 and stats.hits >= 5 and stats.relocations >= 1, stats
    assert stats.ram_hits >= 1 and stats.ram_kept >= 2, stats  # evicted states came back from host memory


@pytest.mark.model
def test_states_longer_than_the_sliding_window(fresh, cached):
    """Gemma 3's sliding-window layers see the last 512 positions, and a saved sequence keeps
    only those; snapshots are saved and restored without the pinned preamble (which they share),
    so a state under 512 tokens beyond it keeps its window through a restore or a move, and a
    partial match into it is used (the loss of a window: the fake-cells test above). The answers
    are bit-identical either way."""
    doc = " ".join(f"Line {i}: the sensor in room {i % 7} reported {20 + i % 5} degrees at noon." for i in range(15))
    states = {"a": doc + " The heating was then switched off.", "b": doc + " The windows were then opened.",
              "c": doc + " Nobody changed anything afterwards."}
    question = ["Was the heating switched off?"]
    reference = {}
    for name, text in states.items():
        job = make_job(fresh, text, question)
        fresh.run([job])
        reference[name] = job.margins
    cache = cached.cache
    cache.clear()
    a = make_job(cached, states["a"], question)
    assert len(a.prefix) > cache.n_swa > 0
    cached.run([a])  # a miss: saved to host memory
    cached.run([a])  # restored from there (its cells beyond the preamble, so its window is whole)
    b = make_job(cached, states["b"], question)
    cached.run([b])  # a partial match into the snapshot of "a", whose window is held
    assert b.margins == reference["b"] and b.reused == common_prefix(a.prefix, b.prefix)
    cache.lost_placement()  # as after an eviction below "a": its next use moves it
    a = make_job(cached, states["a"], question)
    c = make_job(cached, states["c"], question)
    cached.run([a, c])
    assert a.margins == reference["a"] and a.reused == len(a.prefix)
    assert c.margins == reference["c"] and c.reused == common_prefix(a.prefix, c.prefix)  # after a move
    check_cache(cached)


@pytest.mark.model
def test_a_long_state_restored_from_host_memory_is_not_matched_across_the_cells_it_lost():
    """A saved sequence leaves out the sliding-window cells that fell out of its window, so a
    state longer than the window, restored and sharing the preamble's cells again, has a gap in
    its sliding-window cells: a partial match into that gap must not be used (its window is not
    held), though the whole state still is."""
    doc = " ".join(f"Line {i}: the sensor in room {i % 7} reported {20 + i % 5} degrees at noon." for i in range(40))
    texts = {"a": doc + " The heating was then switched off.", "b": doc + " The windows were then opened."}
    question = ["Was the heating switched off?"]
    plain = new_engine(ctx=2048, state_cache=0)
    reference = {}
    for name, text in texts.items():
        job = make_job(plain, text, question)
        plain.run([job])
        reference[name] = job.margins
    plain.close()
    engine = new_engine(ctx=2048, state_cache=3, state_cache_tokens=3000, state_cache_ram_mb=256)
    preamble = len(engine.cache.entries[0].tokens)
    try:
        for _ in range(2):  # a miss (saved to host memory), then restored from there
            a = make_job(engine, texts["a"], question)
            engine.run([a])
            assert a.margins == reference["a"]
        assert len(a.prefix) - preamble > engine.cache.n_swa and engine.cache.stats().ram_hits == 1
        b = make_job(engine, texts["b"], question)
        engine.run([b])
        assert b.margins == reference["b"] and b.reused == preamble
        check_cache(engine)
    finally:
        engine.close()


COUNTERS = ("kept", "max", "tokens", "max_tokens", "hits", "misses", "reused_tokens", "bytes")


@pytest.mark.fleet
def test_health_reports_state_snapshots_summed_and_per_worker(fleet):
    request = {"model": "jev-latest", "state": STATES["crash"],
               "questions": {"q": {"type": "noul", "instructions": "Does the app crash?"}}}
    for _ in range(3):  # a miss, a miss that keeps the state, a hit
        status, _, body = post_json(fleet.url + "/v1/systemone", request)
        assert status == 200, body
    body = fleet.wait_for(lambda h: h["engine"]["state_snapshots"].get("hits", 0) >= 1, "counting a snapshot hit")
    snapshots = body["engine"]["state_snapshots"]
    (worker,) = snapshots["workers"].values()
    assert all(snapshots[k] == worker[k] for k in COUNTERS)
    assert snapshots["kept"] >= 2 and snapshots["reused_tokens"] > 0 and snapshots["bytes"] > 0
