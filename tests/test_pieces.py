from hypothesis import given, strategies as st

from worker.pieces import piece_sizes


@given(total=st.integers(2, 5000), ubatch=st.integers(3, 63))
def test_pieces_cover_the_stream_with_two_to_ubatch_tokens_each(total, ubatch):
    sizes = piece_sizes(total, ubatch)
    assert sum(sizes) == total
    assert all(2 <= s <= ubatch for s in sizes)
    assert len(sizes) <= -(-total // ubatch) + 1


def test_a_lone_trailing_token_is_avoided():
    assert piece_sizes(33, 32) == [17, 16]
    assert piece_sizes(65, 32) == [32, 17, 16]
