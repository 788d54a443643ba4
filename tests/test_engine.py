"""The llama.cpp engine on both GGUFs here (the default model with its profile, SmolLM2 with the
profile derived from its file): answers, and their independence from how a request was batched
or cut (deterministic mode)."""
from __future__ import annotations

import math

import pytest

from jevfleet.harness.engine import model_of, new_engine
from shared.config import default_settings
from shared.profiles import Profile
from worker import warmup
from shared.messages import prefix_key
from worker.engine import Engine
from worker.job import Job
from worker.pieces import shared_rows

CUT_SPREAD = 0.25  # nats a margin may move when only the prefix/question cut moves (see its test)

pytestmark = pytest.mark.model


PROFILES: dict[int, Profile] = {}  # id(engine) -> the profile its jobs are rendered with


@pytest.fixture(scope="module", params=["default", "smollm2-derived"])
def engine(request) -> Engine:
    settings = default_settings()
    if request.param == "smollm2-derived":  # the file alone, no profile named: derived (shared/derive.py)
        settings = default_settings(model=str(model_of(settings, "smollm2-135m")[1]))
    engine = new_engine(settings, ctx=2048, state_cache=4, state_cache_tokens=2048)
    PROFILES[id(engine)] = model_of(settings)[0]
    yield engine
    engine.close()


def long_state(lines: int = 30) -> str:
    """A state whose prefix reaches past the tiled reader's first position (512)."""
    return " ".join(f"Line {i}: the pump in bay {i % 5} ran for {3 + i % 4} hours." for i in range(lines))


def make_job(engine: Engine, state: str, questions: list[str]) -> Job:
    """A request rendered with the engine's profile, tokenized as the gateway does."""
    return warmup.make_job(engine, PROFILES[id(engine)], state, questions)


def test_every_suffix_gets_a_finite_margin(engine):
    job = make_job(engine, "The order shipped on Monday.", ["Has the order shipped?", "Was it cancelled?"])
    read = engine.run([job])
    assert job.reused == len(engine.cache.entries[0].tokens)  # the pinned preamble
    assert read == len(job.prefix) - job.reused + job.suffix_reads  # leading tokens two suffixes share, once
    assert len(job.margins) == 2 and all(math.isfinite(m) for m in job.margins)


def test_answer_is_bit_identical_alone_and_batched_with_others(engine):
    """The batched request reads its state among its batch mates (the cache is cleared between,
    or its state would come back from host memory unread): the three short prefixes and their
    questions in one stream of llama_decode calls, other micro-batches than alone."""
    alone = make_job(engine, "My card was charged twice.", ["Is this about billing?"])
    read_alone = engine.run([alone])
    engine.cache.clear()
    preamble = len(engine.cache.entries[0].tokens)
    mates = [make_job(engine, "The app crashes at start.", ["Is the app broken?", "Is it slow?"]),
             make_job(engine, "Where is my parcel? It is a week late.", ["Is the parcel late?"])]
    again = make_job(engine, "My card was charged twice.", ["Is this about billing?"])
    batch = [mates[0], again, mates[1]]
    before = engine.decode_calls
    read = engine.run(batch)
    assert again.margins == alone.margins
    assert [job.reused for job in batch] == [preamble] * 3  # every state read, none from a snapshot
    assert read == sum(len(job.prefix) - preamble + job.suffix_reads for job in batch)
    assert max(len(job.prefix) for job in batch) < engine.tiled_from
    assert engine.decode_calls - before == len(engine.decode_shapes(read))
    assert engine.decode_shapes(read) != engine.decode_shapes(read_alone)
    assert read_alone == len(alone.prefix) - alone.reused + alone.suffix_reads


def test_the_status_other_threads_read_is_replaced_whole_after_each_batch(engine):
    """Heartbeats read Engine.status from another thread: an immutable value the model thread
    replaces after a batch, never the cache itself, so what a reader holds does not change."""
    before = engine.status
    misses = before.state_snapshots.misses
    job = make_job(engine, "The boiler makes a knocking noise at night.", ["Is the boiler noisy?"])
    engine.run([job])
    assert before.state_snapshots.misses == misses  # what a reader held stayed as it was
    after = engine.status
    assert after.state_snapshots == engine.cache.stats() and after.state_snapshots.misses == misses + 1
    assert after.snapshot_keys == engine.cache.held_keys() and prefix_key(job.prefix) in after.snapshot_keys
    with pytest.raises(AttributeError):
        after.snapshot_keys = frozenset()


def test_a_prefix_read_alone_or_copied_to_a_batch_mate_answers_alike(engine):
    """Alone, a request's short prefix is read in one stream with its suffixes; with a batch mate
    that copies the same prefix, the copy is made after the prefix's read, the suffixes after it.
    Both must answer alike."""
    state, qs = "The refund was sent twice by mistake.", ["Was money sent twice?", "Is it a mistake?"]
    one_stream = make_job(engine, state, qs)
    before = engine.decode_calls
    engine.run([one_stream])
    decodes = engine.decode_calls - before
    twice = [make_job(engine, state, qs), make_job(engine, state, qs[:1])]
    engine.run(twice)
    assert one_stream.margins == twice[0].margins and one_stream.margins[:1] == twice[1].margins
    prefix_read = len(one_stream.prefix) - one_stream.reused
    suffix_read = sum(map(len, one_stream.suffixes))
    assert decodes == len(engine.decode_shapes(prefix_read + suffix_read))


@pytest.mark.parametrize("match", ["none", "below", "above"])
def test_a_long_state_answers_alike_fresh_and_from_a_snapshot_matched_below_or_above_the_tiled_reader(engine, match):
    """A prefix past the tiled reader's first position is read whole there (worker/tiled_reader.py):
    its rows below it through the per-row kernel, the rest through the tiled one. A snapshot of a
    state that shares its first ~400 or ~700 tokens leaves the reader rows on both sides of that
    position, or only rows past it, to read (on Gemma 3 a match past its 512-token window is read
    again from 0); the answer does not move."""
    state = long_state()
    fresh = make_job(engine, state, ["Did the pump in bay 3 run?"])
    engine.run([fresh])
    assert len(fresh.prefix) > engine.tiled_from + 64
    engine.cache.clear()
    if match != "none":
        shared = {"below": engine.tiled_from - 100, "above": engine.tiled_from + 150}[match]
        lines = next(n for n in range(1, 30) if len(make_job(engine, long_state(n), ["?"]).prefix) > shared)
        kept = make_job(engine, long_state(lines) + " Then the power failed.", ["Did the power fail?"])
        for _ in range(2):  # kept on its second miss
            engine.run([kept])
    again = make_job(engine, state, ["Did the pump in bay 3 run?"])
    engine.run([again])
    assert again.margins == fresh.margins
    preamble = len(engine.cache.entries[0].tokens)
    assert {"none": again.reused == preamble, "below": preamble < again.reused < engine.tiled_from,
            "above": again.reused > engine.tiled_from}[match], again.reused


def test_suffixes_that_share_leading_tokens_read_them_once_and_answer_as_each_alone(engine):
    """A choice's options repeat the question before each option: read once (pieces.shared_rows),
    each option's P must still be the one it gets asked alone; a repeated question too."""
    state = "The parcel left the depot on Monday and arrived on Friday."
    qs = [f"Which delay fits? Among the candidates, is it this one? {n} days" for n in (1, 2, 4, 12)] + ["Was it lost?"]
    together = make_job(engine, state, qs + qs[:1])
    read = engine.run([together])
    alone = [make_job(engine, state, [q]) for q in qs]
    for job in alone:
        engine.run([job])
    assert together.margins == [job.margins[0] for job in alone + alone[:1]]
    suffix_rows = read - (len(together.prefix) - together.reused)
    assert suffix_rows == len(shared_rows([(0, s, k) for k, s in enumerate(together.suffixes)]))
    assert suffix_rows < sum(map(len, together.suffixes)) - 20  # the question's ~10 tokens, read once not 5 times


def test_same_request_twice_gives_the_same_answer(engine):
    a = make_job(engine, "The invoice is overdue.", ["Is the invoice overdue?"])
    b = make_job(engine, "The invoice is overdue.", ["Is the invoice overdue?"])
    engine.run([a])
    engine.run([b])
    assert a.margins == b.margins


def test_a_cut_below_the_tiled_reader_moves_no_bit(engine):
    """Below the tiled reader's first position the prefix's rows and the question's take the same
    kernel, so the same tokens cut elsewhere between prefix and question answer bit for bit."""
    full = make_job(engine, "The door is open.", ["Is the door open?"])
    tokens = full.prefix + full.suffixes[0]
    short = Job(prefix=tokens[:-1], suffixes=[tokens[-1:]], yes_ids=full.yes_ids, no_ids=full.no_ids)
    engine.run([full])
    engine.run([short])
    assert len(tokens) < engine.tiled_from and short.margins == full.margins


def test_a_one_token_suffix_past_the_tiled_reader_answers_alike_fresh_and_from_its_snapshot(engine):
    """Past the tiled reader's first position the same tokens cut elsewhere between prefix and
    question are read by other kernels (the prefix's through the tiled reader, the question's row
    by row: worker/tiled_reader.py), so they agree within the spread of a changed cut, not bit
    for bit; the same request agrees bit for bit, its prefix read or kept. The spread: llama.cpp's
    own exact reading moves by a median 0.085 nats when only its micro-batch cut changes (`make
    bench NAME=exact`), and such a pair moved 0.100 on the portable build (AVX2 kernels) against
    under 0.05 on AVX-512 ones. A wrong cell or position moves a margin by whole nats; the bound,
    0.25, is three times that median."""
    full = make_job(engine, long_state(), ["Is the door open?"])
    tokens = full.prefix + full.suffixes[0]
    short, again = (Job(prefix=tokens[:-1], suffixes=[tokens[-1:]], yes_ids=full.yes_ids, no_ids=full.no_ids)
                    for _ in range(2))
    engine.run([full])
    engine.run([short])
    engine.run([again])
    assert len(full.prefix) > engine.tiled_from
    assert again.reused > short.reused and again.margins == short.margins
    assert abs(short.margins[0] - full.margins[0]) < CUT_SPREAD * max(1.0, abs(full.margins[0]))


def test_more_suffixes_than_one_wave_holds_are_all_answered(engine):
    questions = [f"Is the number {i} mentioned?" for i in range(70)]
    many = make_job(engine, "The numbers 3, 17 and 42 are listed.", questions)
    engine.run([many])
    assert len(many.margins) == 70 and all(math.isfinite(m) for m in many.margins)
    for i in (0, 17, 69):
        one = make_job(engine, "The numbers 3, 17 and 42 are listed.", [questions[i]])
        engine.run([one])
        assert one.margins[0] == many.margins[i]


def test_the_budget_counts_only_tokens_a_request_adds(engine):
    job = make_job(engine, "The lamp in the hallway flickers every evening after nine.", ["Is the lamp broken?"])
    suffix = len(job.suffixes[0])
    preamble = len(engine.cache.entries[0].tokens)
    assert engine.new_tokens(job, []) == len(job.prefix) - preamble + suffix
    twin = make_job(engine, "The lamp in the hallway flickers every evening after nine.", ["Is it evening?"])
    assert engine.new_tokens(twin, [job]) == len(twin.suffixes[0])  # a batch mate reads the state
    engine.run([job])
    assert prefix_key(job.prefix) not in engine.cache.keys  # kept on its second miss, not its first
    engine.run([job])
    assert prefix_key(job.prefix) in engine.cache.keys
    assert engine.new_tokens(twin, []) == len(twin.suffixes[0])  # now a snapshot holds it
    engine.run([twin])
    assert twin.reused == len(twin.prefix)
