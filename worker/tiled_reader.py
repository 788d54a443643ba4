"""Deterministic mode's long prefixes, read in a context of their own: from position TILED_FROM on
through flash attention's tiled kernel.

From 64 query rows ggml's CPU flash attention takes a tiled kernel, 1.2-2x faster on a fresh read
than its per-row kernel (bench/fresh_read.py, in git at 4a17b4c; docs/benchmarks-history.md), whose
sums follow 64-cell tile edges counted from the first cell of the cache; in the engine's context,
whose cells every sequence shares, those edges fall anywhere in a prefix. Here one sequence has the
cache to itself: emptied before each read, cell p holds position p, so the edges fall at fixed
positions (bench/tiled_read.py, in git at 4a17b4c, checks it bit for bit, with controls that
differ). The prefix's new cells then go to the engine's context as a sequence blob, where only
question rows are read (per-row kernel, under 64 rows), and that kernel depends only on the cells'
order, which a blob keeps.

Which kernel reads a prefix row depends on its position alone: below `tiled_from` (TILED_FROM,
512, or less within a shorter sliding window) the per-row kernel, in pieces of the rule's shapes
(worker/pieces.py); from there on the tiled one. A prefix that ends below tiled_from is read by
the engine in its own context, in the same llama_decode calls as its questions (where a tiled
read would round a short state up to 64 rows and move it by blob); a longer one is read here
whole, its rows below tiled_from too (the per-row kernel's sums depend only on the order of a
sequence's cells, so they are the engine's; and here they walk only this sequence's cells, where
the engine's kept snapshots would make every row step over thousands of masked cells).

The tiled rows go CALL_ROWS (512) a llama_decode, the last call rounded up to whole tiles: a row's
sums in the tiled kernel are its own (its own running maximum and sum; a key tile masked for it
adds exact zeros), so they depend on the key tiles' edges, not on which rows share its call or its
query tile. Measured against 64 rows a call (2026-12-07, one process, first reads, margins
bit-identical): a 1,785-token state on Qwen2.5 1.5B 25.31 s in 25 calls, 22.34 s in 8; a
1,729-token one on Gemma 3 270M 4.11 s in 26, 3.60 s in 9 (3.97 and 3.04 s on the AVX-512 build):
each call streams the weights once.

Invariant: every prefix row (preamble and state) at a position from tiled_from on is read here,
in calls of whole TILEs, a short last tile filled with throwaway rows after the prefix, with cell
p holding position p for every position before it; every row below tiled_from is read
by the per-row kernel, here or in the engine. So a row's K and V depend only on the tokens up to
it, never on a snapshot match, a batch mate or where the engine's cells lie. What the engine
already holds of a prefix (the preamble, a snapshot's match) comes in as a blob; except where a
sliding window would leave cells out of it (a match longer than the window): that prefix is read
again from position 0, as the gap would shift the cells after it against the tile edges.
"""
from __future__ import annotations

from typing import Protocol

from shared.llama import FA_TILE as TILE, llama, restore_sequence, save_sequence
from shared.memory import reader_cells
from worker.pieces import UBATCH, piece_sizes

TILED_FROM = 512  # positions below it take the per-row kernel (docs/architecture.md: why 512)
CALL_ROWS = 8 * TILE  # rows of one tiled llama_decode: whole tiles, as llama.cpp's own 512-row micro-batches


def tiled_from(n_swa: int) -> int:
    """The first position read through the tiled kernel: TILED_FROM, or the sliding window's
    length down to a multiple of TILE if that is shorter, so that the cells the engine holds
    below it come over as a whole blob (a saved sequence keeps only its window's cells)."""
    return min(TILED_FROM, n_swa - n_swa % TILE) if n_swa > 0 else TILED_FROM


class Cells(Protocol):
    """The engine's side of a move (worker/engine.py)."""
    scratch: int
    decode_calls: int  # the engine's count of llama_decode calls that read requests: the reader's go there too

    def save(self, seq: int): ...
    def restore(self, seq: int, blob) -> None: ...
    def copy(self, src: int, dst: int, length: int) -> None: ...
    def remove(self, seq: int, p0: int = -1, p1: int = -1) -> None: ...
    def pos_min(self, seq: int) -> int: ...


class TiledReader:
    """A one-sequence llama.cpp context on the engine's model, with the engine's threads and KV types."""

    def __init__(self, model, *, ctx: int, threads: int, kv_type: int) -> None:
        lib = llama()
        self.n_swa = lib.llama_model_n_swa(model)
        self.tiled_from = tiled_from(self.n_swa)
        params = lib.llama_context_default_params()
        params.n_ctx, params.n_seq_max = reader_cells(ctx), 1
        params.n_batch = params.n_ubatch = CALL_ROWS
        params.n_outputs_max = 1  # a prefix piece has no output rows
        params.n_threads = params.n_threads_batch = threads
        params.flash_attn_type = lib.LLAMA_FLASH_ATTN_TYPE_ENABLED
        params.type_k = params.type_v = kv_type  # blobs move between this context and the engine's
        params.swa_full = True
        params.no_perf = True
        self.ctx = lib.llama_init_from_model(model, params)
        if not self.ctx:
            raise RuntimeError("llama.cpp could not create the tiled reader's context")
        self.mem = lib.llama_get_memory(self.ctx)
        self.batch = lib.llama_batch_init(CALL_ROWS, 0, 1)

    def close(self) -> None:
        lib = llama()
        if self.ctx:
            lib.llama_batch_free(self.batch)
            lib.llama_free(self.ctx)
            self.ctx = None

    def read(self, cells: Cells, tokens: list[int], start: int = 0) -> None:
        """Read `tokens` (more than tiled_from) from position `start` (the cache holds positions 0
        to start - 1 in cells 0 to start - 1): the rows below tiled_from in the per-row kernel's
        pieces, the rest up to CALL_ROWS rows a call, the last rounded up to whole tiles with
        throwaway rows at the positions after it, removed afterwards."""
        if len(tokens) <= self.tiled_from:
            raise ValueError("the engine reads prefixes that end below tiled_from itself")
        at = start
        if at < self.tiled_from:
            for size in piece_sizes(self.tiled_from - at, UBATCH):
                part = tokens[at : min(at + size, self.tiled_from)]
                self._decode(cells, part + [part[-1]] * (size - len(part)), at)
                at += len(part)
            llama().llama_memory_seq_rm(self.mem, 0, self.tiled_from, -1)
        for at in range(at, len(tokens), CALL_ROWS):
            part = tokens[at : at + CALL_ROWS]
            self._decode(cells, part + [part[-1]] * (-len(part) % TILE), at)
        llama().llama_memory_seq_rm(self.mem, 0, len(tokens), -1)

    def _decode(self, cells: Cells, tokens: list[int], at: int) -> None:
        """One llama_decode of `tokens` at positions from `at`, no output rows."""
        b = self.batch
        for i, token in enumerate(tokens):
            b.token[i], b.pos[i], b.n_seq_id[i], b.logits[i] = token, at + i, 1, False
            b.seq_id[i][0] = 0
        b.n_tokens = len(tokens)
        rc = llama().llama_decode(self.ctx, b)
        if rc != 0:
            raise RuntimeError(f"llama_decode returned {rc} in the tiled reader")
        cells.decode_calls += 1

    def read_into(self, cells: Cells, seq: int, start: int, prefix: list[int]) -> int:
        """Read `prefix` (longer than tiled_from) and give `seq` of the engine's context, which
        holds its first `start` tokens, the cells of the rest: restored into the scratch sequence
        (first-fit, in position order) and shared from there. Returns where its sliding-window
        cells start if a window left out some of the new ones, else 0 (worker/snapshot_moves.py:
        the cache must not match across that gap)."""
        lib = llama()
        lib.llama_memory_clear(self.mem, True)
        held = start if start and (self.n_swa <= 0 or start <= self.n_swa) else 0
        if held:  # its cells, in position order (worker/snapshots.py): here 0 to start - 1
            restore_sequence(self.ctx, 0, cells.save(seq))
        self.read(cells, prefix, held)
        lib.llama_memory_seq_rm(self.mem, 0, 0, start)
        cells.restore(cells.scratch, save_sequence(self.ctx, 0))
        window_from = cells.pos_min(cells.scratch)
        cells.copy(cells.scratch, seq, len(prefix))
        cells.remove(cells.scratch)
        return window_from if window_from > start else 0
