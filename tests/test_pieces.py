from hypothesis import given, strategies as st

from worker.pieces import MIN_ROWS, ROW_STEP, piece_sizes


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
