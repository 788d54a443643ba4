"""Where a sequence's KV cells are, as far as llama.cpp tells: a saved sequence state
(llama_state_seq_get_data) lists its cells in cell-index order with their positions, once for
each KV cache of the context (Gemma 3: the global layers', then the sliding-window layers').
Tests use it to check that every sequence's cells are in position order."""
from __future__ import annotations

import struct

from worker.engine import Engine


def cell_positions(engine: Engine, seq: int) -> list[list[int]]:
    """Positions of seq's cells in cell order, one list per KV cache."""
    blob = bytes(engine.save(seq))
    at = 8  # magic, seq_id

    def take(fmt: str):
        nonlocal at
        values = struct.unpack_from("<" + fmt, blob, at)
        at += struct.calcsize("<" + fmt)
        return values

    caches = []
    while at < len(blob):
        (n_stream,) = take("I")
        positions: list[int] = []
        for _ in range(n_stream):
            (count,) = take("I")
            if not count:
                continue
            for _ in range(count):
                pos, n_seq = take("iI")
                take(f"{n_seq}i")
                positions.append(pos)
            v_trans, n_layer = take("II")
            assert not v_trans, "flash attention keeps V untransposed"
            for _ in range(2 * n_layer):  # K rows of every layer, then V rows
                _, row = take("iQ")
                at += row * count
        caches.append(positions)
    assert at == len(blob), "state layout not understood"
    return caches


def in_position_order(engine: Engine, seq: int) -> bool:
    return all(p == sorted(p) and len(set(p)) == len(p) for p in cell_positions(engine, seq))
