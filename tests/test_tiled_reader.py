"""Where the tiled reader takes over (worker/tiled_reader.py): a fixed position, never a request's length."""
from __future__ import annotations

import pytest

from worker.tiled_reader import TILE, TILED_FROM, tiled_from


@pytest.mark.parametrize(("n_swa", "first"), [(0, TILED_FROM), (4096, TILED_FROM), (512, 512), (500, 448), (40, 0)])
def test_the_tiled_kernel_starts_at_512_or_within_a_shorter_sliding_window(n_swa, first):
    """A sliding window shorter than 512 moves the start down to a tile edge inside it, so that the
    cells the engine holds below it come over whole (a saved sequence keeps only its window)."""
    assert tiled_from(n_swa) == first and first % TILE == 0
