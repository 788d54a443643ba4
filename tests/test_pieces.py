from hypothesis import given, strategies as st

from worker.pieces import MIN_ROWS, ROW_STEP, piece_sizes, suffix_waves


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
