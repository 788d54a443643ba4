"""worker/hidden.py on the real default model: the columns the engine computes from the final
hidden state, rounded to 8 bits as ggml rounds it for its output matmul, are llama.cpp's own logits."""
from __future__ import annotations

import math

import numpy as np
import pytest

from jevfleet.harness.engine import new_engine
from shared.llama import llama
from worker.engine import Engine
from worker.hidden import OutputMatrix, q8_0_round_trip
from worker.pieces import token_rows

pytestmark = pytest.mark.model


@pytest.fixture(scope="module")
def engine() -> Engine:
    engine = new_engine(ctx=1024, state_cache=0)
    yield engine
    engine.close()


def logits_row(engine: Engine, row: int) -> np.ndarray:
    """What llama.cpp's logits buffer holds for batch row `row` of the last decode."""
    return np.ctypeslib.as_array(llama().llama_get_logits_ith(engine.ctx_ptr, row), shape=(engine.n_vocab,))


def test_columns_from_the_hidden_state_match_llama_cpps_logits_row_by_row(engine):
    """Three output rows in one call, each compared with the row llama.cpp computes when it is
    let finish the output matmul: so the hidden states come back in batch order, one per row."""
    tokens = engine.tokenize("The parcel came late and the box was crushed; the customer wants a refund.")
    outputs = {4: "a", 9: "b", len(tokens) - 1: "c"}
    rows = [(t, p, s, (p,) if p in outputs else ()) for t, p, s, _ in token_rows((0,), 0, tokens)]
    hidden: dict[int, np.ndarray] = {}
    engine.tap.full_logits = True
    try:
        engine._read(rows, lambda row, h, _full: hidden.__setitem__(row, h.astype(np.float64)))
    finally:
        engine.tap.full_logits = False
        engine.remove(0)
    assert sorted(hidden) == sorted(outputs)
    matrix: OutputMatrix = engine.readout.matrix
    for row, h in hidden.items():
        logits = logits_row(engine, row)
        top = np.argsort(-logits)[:20]
        ours = matrix.rows(top) @ q8_0_round_trip(h)
        assert np.abs(ours - logits[top]).max() < 1e-3  # float sums in another order, nothing more


def test_a_decode_with_outputs_skips_the_output_matmul(engine):
    """Stopped at result_norm, llama.cpp's logits buffer does not get this row's W·h (it keeps the
    row of the text read before); let finish, the very same read and comparison find it there, so
    a wrong row or a wrong reading cannot pass."""
    def rows_of(text: str) -> list:
        tokens = engine.tokenize(text)
        return [(t, p, s, ("x",) if p == len(tokens) - 1 else ()) for t, p, s, _ in token_rows((0,), 0, tokens)]

    def gap(rows: list, full_logits: bool) -> float:
        """Largest |W·h − llama.cpp's buffer| over the first 50 columns of the output row."""
        got: list[np.ndarray] = []
        engine.tap.full_logits = full_logits
        try:
            engine._read(rows, lambda _key, h, _full: got.append(q8_0_round_trip(h)))
        finally:
            engine.tap.full_logits = False
            engine.remove(0)
        ours = engine.readout.matrix.rows(np.arange(50)) @ got[0]
        return float(np.abs(ours - logits_row(engine, len(rows) - 1)[:50]).max())

    sky = rows_of("Is the sky blue today?")
    assert gap(rows_of("The parcel came late and the box was crushed."), full_logits=True) < 1e-3
    assert gap(sky, full_logits=False) > 0.5  # the buffer still holds the parcel's row
    assert gap(sky, full_logits=True) < 1e-3


def _header_only(path, arch: str, **floats: float) -> None:
    from gguf import GGUFWriter

    writer = GGUFWriter(str(path), arch)
    for key, value in floats.items():
        writer.add_float32(f"{arch}.{key}", value)
    writer.add_tensor("token_embd.weight", np.zeros((4, 8), np.float32))  # 4 tokens, 8 wide
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def test_soft_capped_logits_are_capped_as_llama_cpp_caps_them(tmp_path):
    """Gemma 2's final soft cap, cap·tanh(x/cap), after the matmul (src/models/gemma2.cpp)."""
    _header_only(tmp_path / "capped.gguf", "gemma2", final_logit_softcapping=30.0)
    matrix = OutputMatrix(tmp_path / "capped.gguf", n_vocab=4, n_embd=8)
    assert matrix.finish(np.array([0.0, 30.0, -300.0])) == pytest.approx([0.0, 30 * math.tanh(1), -30 * math.tanh(10)])


def test_a_logit_scale_is_applied_the_way_the_architecture_applies_it(tmp_path):
    _header_only(tmp_path / "minicpm.gguf", "minicpm", logit_scale=6.0)
    _header_only(tmp_path / "plain.gguf", "llama", logit_scale=6.0)  # a key llama's graph does not read
    assert OutputMatrix(tmp_path / "minicpm.gguf", n_vocab=4, n_embd=8).finish(3.0) == pytest.approx(0.5)
    assert OutputMatrix(tmp_path / "plain.gguf", n_vocab=4, n_embd=8).finish(3.0) == 3.0
