"""llama.cpp's most exact reading of a prompt: the yardstick the served margins are held to.

A plain context of its own on the engine's model: the whole prompt in one llama_decode, K and V
cached as F32, flash attention off, the margin taken from llama.cpp's own logits row of the last
token (its output matmul finished, no hidden-state readout). Nothing of the serving path (pinned
preamble, snapshots, pieces of at most 60 rows, padding rows, the readout from h) is in it, so a
served margin that drifts from this one has a cause on that path or in the build.
The start-up canary (worker/canary.py) and `make bench NAME=exact` (bench/exact.py, which also
varies one thing of the reading at a time) read through it. Only the thread that owns the engine
may use one, and it is closed right after: it holds a second, small KV cache.
"""
from __future__ import annotations

import numpy as np

from shared.llama import llama
from worker.engine import KV_TYPES
from worker.head import yes_no_margin
from worker.pieces import piece_sizes

MAX_TOKENS = 512  # longest prompt a reader takes by default (the bench's are ~300 tokens; the canary
# sizes its reader to its prompts: 608 tokens with MiniCPM's template and Llama 2's 32k vocabulary)

READER_STEP = 64  # a reader's length is a multiple of this


def reader_length(tokens: int) -> int:
    """The length of a reader for prompts of up to `tokens`: rounded up to READER_STEP, so that the
    canary's prompts, a few tokens longer or shorter in another file's vocabulary or template, get
    a reader of a round size (its cells cost 0.8 MB a token on Phi-3.5: not much more than needed)."""
    return -(-tokens // READER_STEP) * READER_STEP


class ExactReader:
    """Reads one prompt at a time and returns the yes−no margin of llama.cpp's logits row.
    type_k, type_v, flash: the exact reading by default; other values for the bench's variants."""

    def __init__(self, model, *, threads: int, yes: list[int], no: list[int], type_k: str = "f32",
                 type_v: str = "f32", flash: bool = False, longest: int = MAX_TOKENS) -> None:
        lib = llama()
        cparams = lib.llama_context_default_params()
        self.longest = longest  # the longest prompt it takes (its F32 cells cost: 0.8 MB a token on Phi-3.5)
        cparams.n_ctx = 2 * longest
        cparams.n_batch = cparams.n_ubatch = longest
        cparams.n_seq_max = 2  # the prompt, and the throwaway rows of a read in pieces
        cparams.n_outputs_max = 2  # llama.cpp wants one per sequence; one logits row is 1 MB with Gemma
        cparams.n_threads = cparams.n_threads_batch = threads
        cparams.type_k, cparams.type_v = KV_TYPES[type_k], KV_TYPES[type_v]
        cparams.flash_attn_type = lib.LLAMA_FLASH_ATTN_TYPE_ENABLED if flash else lib.LLAMA_FLASH_ATTN_TYPE_DISABLED
        cparams.kv_unified = True
        cparams.swa_full = True
        cparams.no_perf = True
        self.ctx = lib.llama_init_from_model(model, cparams)
        if not self.ctx:
            raise RuntimeError("llama.cpp could not create a context for the exact reading")
        self.mem = lib.llama_get_memory(self.ctx)
        self.batch = lib.llama_batch_init(longest, 0, 1)
        self.n_vocab = lib.llama_vocab_n_tokens(lib.llama_model_get_vocab(model))
        self.yes, self.no = yes, no

    def margin(self, tokens: list[int], *, pieces: int = 0, pad: bool = True, cut: int = 0) -> float:
        """The margin after `tokens`: read in one pass, or (pieces: the micro-batch cap) in the
        deterministic mode's pieces, the last one filled up with throwaway rows of sequence 1
        (pad) or left short, or (cut) in pieces of `cut` rows whatever the shape rules say."""
        if not 0 < len(tokens) <= self.longest:
            raise ValueError(f"this exact reading takes 1 to {self.longest} tokens, not {len(tokens)}")
        lib = llama()
        lib.llama_memory_clear(self.mem, True)
        if cut:
            sizes = [min(cut, len(tokens) - at) for at in range(0, len(tokens), cut)]
        else:
            sizes = piece_sizes(len(tokens), pieces) if pieces else [len(tokens)]
        if not pad:
            sizes[-1] -= sum(sizes) - len(tokens)
        rows = [(tok, pos, 0) for pos, tok in enumerate(tokens)]
        rows += [(tokens[0], pos, 1) for pos in range(sum(sizes) - len(tokens))]
        last, at, logits = len(tokens) - 1, 0, None
        for size in sizes:
            b = self.batch
            for i, (tok, pos, seq) in enumerate(rows[at:at + size]):
                b.token[i], b.pos[i], b.n_seq_id[i], b.seq_id[i][0] = tok, pos, 1, seq
                b.logits[i] = seq == 0 and pos == last
            b.n_tokens = size
            if lib.llama_decode(self.ctx, b) != 0:
                raise RuntimeError("llama_decode failed in the exact reading")
            if at <= last < at + size:
                row = lib.llama_get_logits_ith(self.ctx, last - at)
                logits = np.ctypeslib.as_array(row, shape=(self.n_vocab,)).astype(np.float64)
            at += size
        return yes_no_margin(logits.__getitem__, self.yes, self.no)

    def close(self) -> None:
        if self.ctx:
            lib = llama()
            lib.llama_batch_free(self.batch)
            lib.llama_free(self.ctx)
            self.ctx = None
