from hypothesis import given, strategies as st

from shared.messages import suffix_tokens
from worker.pieces import MIN_ROWS, ROW_STEP, output_rows, piece_sizes, shared_rows, suffix_waves


@given(total=st.integers(1, 5000), ubatch=st.sampled_from([12, 16, 32, 48, 60]))
def test_pieces_take_whole_row_steps_and_pad_as_little_as_possible(total, ubatch):
    sizes = piece_sizes(total, ubatch)
    assert all(s % ROW_STEP == 0 and MIN_ROWS <= s <= ubatch for s in sizes)
    assert sum(sizes) == max(MIN_ROWS, -(-total // ROW_STEP) * ROW_STEP)
    assert len(sizes) == -(-sum(sizes) // ubatch)


def test_examples():
    assert piece_sizes(1, 60) == [8]
    assert piece_sizes(13, 60) == [16]
    assert piece_sizes(60, 60) == [60]
    assert piece_sizes(61, 60) == [56, 8]
    assert piece_sizes(130, 60) == [60, 60, 12]


@given(wanted=st.integers(0, 60), total=st.integers(1, 5000))
def test_output_rows_are_none_or_a_piece_shape_that_holds_every_answer(wanted, total):
    rows = piece_sizes(total, 60)[-1]
    flagged = output_rows(min(wanted, rows), rows)
    assert flagged == 0 if wanted == 0 else (flagged % ROW_STEP == 0 and min(wanted, rows) <= flagged <= rows
                                            and flagged >= MIN_ROWS)


def test_output_rows_examples():
    assert [output_rows(n, 60) for n in (0, 1, 4, 8, 9, 13, 60)] == [0, 8, 8, 8, 12, 16, 60]
    assert output_rows(3, 8) == 8 and output_rows(12, 12) == 12


def test_suffix_waves_take_every_suffix_once_within_sequences_and_tokens():
    lengths = [[12] * 30, [500], [3, 4]]
    waves = suffix_waves(lengths, range(3, 13), wave_tokens=100)
    flat = [(j, s) for wave in waves for _, j, s in wave]
    assert flat == [(j, s) for j, ls in enumerate(lengths) for s in range(len(ls))]  # in order, once
    for wave in waves:
        assert [seq for seq, _, _ in wave] == list(range(3, 3 + len(wave)))  # the free sequences, from the first
        assert len(wave) <= 10
        tokens = [lengths[j][s] for _, j, s in wave]
        assert sum(tokens[:-1]) < 100  # a wave closes once it holds wave_tokens (its last may cross)
    assert suffix_waves([[500], [500]], range(5, 9), wave_tokens=100) == [[(5, 0, 0)], [(5, 1, 0)]]  # too long: alone


@given(st.lists(st.lists(st.integers(0, 3), min_size=1, max_size=6), min_size=1, max_size=12))
def test_shared_rows_read_each_suffix_in_order_and_each_common_head_once(suffixes):
    rows = shared_rows([(100 + k, tokens, k) for k, tokens in enumerate(suffixes)])
    for k, tokens in enumerate(suffixes):  # every sequence sees exactly its tokens, in row order
        mine = [(tok, depth) for tok, depth, seqs, _ in rows if 100 + k in seqs]
        assert mine == [(tok, i) for i, tok in enumerate(tokens)]
        (end,) = [i for i, (_, _, _, keys) in enumerate(rows) if k in keys]
        assert 100 + k in rows[end][2] and rows[end][1] == len(tokens) - 1
    distinct_heads = {tuple(tokens[:i + 1]) for tokens in suffixes for i in range(len(tokens))}
    assert len(rows) == len(distinct_heads) == suffix_tokens(suffixes)


def test_shared_rows_example():
    assert shared_rows([(5, [1, 2, 3], 0), (6, [1, 2, 4], 1), (7, [9], 2), (8, [1, 2, 3], 3)]) == [
        (1, 0, (5, 6, 8), ()), (2, 1, (5, 6, 8), ()), (3, 2, (5, 8), (0, 3)), (4, 2, (6,), (1,)),
        (9, 0, (7,), (2,))]
