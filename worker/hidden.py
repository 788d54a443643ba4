"""The final hidden state instead of the full-vocabulary logits row.

An answer needs a few columns of a logits row: the yes and no tokens, or the learned head's
(worker/head.py). llama.cpp computes all of them, 262,144 with Gemma 3, at every output row: the
output matrix W (logits = W·h, 170 MB of Q8_0 for Gemma 3) goes through the cores once per
llama_decode that has outputs, plus about 4 ms per further output row on two cores. Measured on
12- and 48-token reads: one output row costs 14–26 ms, twelve 48–65 ms, of a 35–120 ms call.

So the engine stops llama.cpp's graph at its `result_norm` node, the final hidden state h of each
output row: ggml's scheduler asks an eval callback about every node, computes up to one the
callback wants to see, shows it, and stops there when the callback answers False (the rest of
the graph is the output matmul). The engine then takes the columns it needs as W[ids]·h itself,
W's rows dequantized from the GGUF file by the gguf package (ggml's Python tools), then what the
graph does after its matmul (a logit scale, Gemma 2's soft cap: OutputMatrix.finish).

Invariant: a column is a function of h alone, so an answer is as independent of batch mates and
cache state as h is. h itself can move in its last bits (the attention sums over cells in other
orders); llama.cpp's output matmul first rounds h to 8 bits a value (Q8_0, the activation type
ggml pairs with Q8_0 weights), which absorbs that, and so does the engine: it reads columns from
h rounded the same way (q8_0_round_trip), in fixed-order sums (worker/head.py). With output
weights of a K-quant type (a Q4_K_M file's Q6_K) ggml rounds h to Q8_K instead, by blocks of 256
with a float32 scale; the engine still rounds to Q8_0, whose float16 scale absorbs the last bits
of a block's largest value where Q8_K's passes them on into every value of the block (mirroring
Q8_K moved a Llama 3.2 1B-shaped file's margin by 2e-8 among batch mates). It matches llama.cpp's
logits less closely then (by ~1 % of the largest logit on the zoo's files); the canary checks the
readout with llama.cpp's own rounding instead (OutputMatrix.as_llama_rounds).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType
from gguf.quants import dequantize

from shared.gguf_header import GgufHeader
from shared.llama import ggml, llama

HIDDEN_NODE = b"result_norm"  # the name every llama.cpp model graph gives the normed final state
Q8_0_BLOCK, Q8_K_BLOCK = 32, 256
K_QUANTS = ("Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K")  # types ggml multiplies with Q8_K activations
# Architectures whose graph scales the output matmul by {arch}.logit_scale (src/models/*.cpp)
DIVIDED_BY_LOGIT_SCALE = ("minicpm", "granite", "granitemoe")
MULTIPLIED_BY_LOGIT_SCALE = ("command-r", "cohere2")


def q8_0_round_trip(h: np.ndarray) -> np.ndarray:
    """h as ggml's quantize_row_q8_0 leaves it: per block of 32 values, a scale max|x|/127 kept
    as float16 and each value rounded (half away from zero) to a multiple of it; float64 out."""
    blocks = h.astype(np.float32).reshape(-1, Q8_0_BLOCK)
    scale = np.abs(blocks).max(axis=1, keepdims=True) / np.float32(127)
    inverse = np.divide(np.float32(1), scale, out=np.zeros_like(scale), where=scale != 0)
    scaled = blocks * inverse
    q = np.sign(scaled) * np.floor(np.abs(scaled) + np.float32(0.5))
    return (q.astype(np.float64) * scale.astype(np.float16).astype(np.float64)).reshape(h.shape)


def q8_k_round_trip(h: np.ndarray) -> np.ndarray:
    """h as ggml's quantize_row_q8_K_ref leaves it (the activations of a K-quant matmul): per block
    of 256 values, iscale = -127 / (the value of largest magnitude), each value x rounded half to
    even as iscale·x in float32, capped at 127, times 1/iscale; float64 out."""
    blocks = h.astype(np.float32).reshape(-1, Q8_K_BLOCK)
    peak = blocks[np.arange(len(blocks)), np.abs(blocks).argmax(axis=1)]
    with np.errstate(divide="ignore"):
        iscale = np.where(peak != 0, np.float32(-127) / peak, np.float32(0)).astype(np.float32)
        d = np.where(iscale != 0, np.float32(1) / iscale, np.float32(0)).astype(np.float32)
    q = np.minimum(np.rint(blocks * iscale[:, None]), 127)
    return (q.astype(np.float64) * d.astype(np.float64)[:, None]).reshape(h.shape)


class OutputMatrix:
    """Rows of a model's output matrix (its own, or the tied token embeddings), read on demand
    from the memory-mapped GGUF file; a row is 5 KB of float64 (Gemma 3 270M), a handful are
    kept. ggml's GGUF reader finds the tensor (shared/gguf_header.py: gguf's Python reader
    would parse the 262k-entry vocabulary first)."""

    def __init__(self, path: Path, *, n_vocab: int, n_embd: int) -> None:
        with GgufHeader(path) as header:
            if header is None:
                raise RuntimeError(f"ggml could not read {path}")
            arch = header.string("general.architecture")
            self.softcap = header.f32(f"{arch}.final_logit_softcapping") or 0.0
            scale = header.f32(f"{arch}.logit_scale") or (256 / n_embd if arch == "minicpm" else 1.0)
            self.logit_factor = 1 / scale if arch in DIVIDED_BY_LOGIT_SCALE else \
                scale if arch in MULTIPLIED_BY_LOGIT_SCALE else 1.0
            tensor = header.tensor("output.weight") or header.tensor("token_embd.weight")
        if tensor is None:
            raise ValueError(f"{path.name}: no output matrix (output.weight or token_embd.weight)")
        self._type = GGMLQuantizationType(tensor.type)
        self.n_vocab, self.n_embd = n_vocab, n_embd
        self._data = np.memmap(path, dtype=np.uint8, mode="r", offset=tensor.offset,
                               shape=(n_vocab, tensor.size // n_vocab))
        self._rows: dict[int, np.ndarray] = {0: self.rows([0])[0]}  # gguf dequantizes this type, or fail now

    def as_llama_rounds(self, h: np.ndarray) -> np.ndarray:
        """h rounded as llama.cpp rounds it for its matmul with this matrix (Q8_K for a K-quant,
        else Q8_0): what the canary compares with llama.cpp's row, not what answers are read with."""
        return q8_k_round_trip(h) if self.type_name in K_QUANTS else q8_0_round_trip(h)

    def finish(self, logits):
        """What llama.cpp's graph does to the output matmul's logits before it hands them out, as
        this file's architecture says: a logit scale (MiniCPM, Granite divide by it, Command-R
        multiplies), then the final soft cap cap·tanh(x/cap) (Gemma 2; Gemma 3 when the file
        sets it). Element-wise, so a column stays a function of h alone; float64 here, float32
        in ggml (the canary's tolerance covers the difference)."""
        if self.logit_factor != 1.0:
            logits = logits * self.logit_factor
        if self.softcap:
            logits = self.softcap * np.tanh(logits / self.softcap)
        return logits

    @property
    def type_name(self) -> str:
        """The output matrix's tensor type (Q8_0 is the rounding q8_0_round_trip mirrors)."""
        return self._type.name

    def rows(self, ids: np.ndarray | list[int]) -> np.ndarray:
        """W[ids] as float64, one row per id."""
        ids = np.asarray(ids, dtype=np.int64)
        return dequantize(np.asarray(self._data[ids]), self._type).astype(np.float64)

    def row(self, token: int) -> np.ndarray:
        if token not in self._rows:
            self._rows[token] = self.rows([token])[0]
        return self._rows[token]


class HiddenTap:
    """ggml's eval callback: keeps the hidden state of each output row of the last llama_decode
    and ends the graph there. Runs on the thread that calls llama_decode."""

    def __init__(self, n_embd: int) -> None:
        self.n_embd = n_embd
        self.hidden: np.ndarray | None = None  # set by the callback, taken (and cleared) by take()
        self.full_logits = False  # let llama.cpp finish the output matmul too (tests compare the two)
        self.callback = llama().ggml_backend_sched_eval_callback(self._node)  # kept alive here
        self._ggml = ggml()  # asked at every graph node: looked up once

    def _node(self, tensor: int, ask: bool, _user: int) -> bool:
        lib = self._ggml
        if ask:
            return lib.ggml_get_name(tensor) == HIDDEN_NODE
        n = lib.ggml_nelements(tensor)
        shape = (n // self.n_embd, self.n_embd)
        self.hidden = np.ctypeslib.as_array(lib.ggml_get_data_f32(tensor), shape=shape).copy() if n else \
            np.empty(shape, np.float32)
        return self.full_logits  # False: what follows is the output matmul, which nobody reads

    def take(self, n_outputs: int) -> np.ndarray:
        """The hidden states of the last call's n_outputs output rows, in batch order; the caller
        clears `hidden` before that call, so a graph without the node cannot hand out stale rows."""
        hidden, self.hidden = self.hidden, None
        if n_outputs == 0:
            return np.empty((0, self.n_embd), np.float32)
        if hidden is None or len(hidden) != n_outputs:
            raise RuntimeError(f"llama.cpp's graph showed no {HIDDEN_NODE.decode()} of {n_outputs} rows")
        return hidden
