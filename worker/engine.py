"""One llama.cpp model and context, driven through llama-cpp-python's low-level API.

The engine reads a batch of requests: each request's prefix (preamble + state) into a sequence
of its own, then every suffix (one per yes/no job) into a sequence that starts as a copy of its
prefix. Logits are computed only at the last token of each suffix, and only the yes/no token
columns are read from them: the 262k-column output row is never copied.

Deterministic mode (the default) makes a P(yes) independent of batch mates and of how the
prompt was cut (see architecture.md): no weight repacking, no tiled K-quant matmul, flash
attention on, and every micro-batch 2..32 tokens (worker/pieces.py).
Only the scheduler thread may call into an Engine.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from shared.llama import llama, load_model, tokenize
from worker.pieces import piece_sizes

UBATCH = 32  # deterministic micro-batch size (must stay <= 63)
WAVE_TOKENS = 512  # suffix tokens decoded per wave of sequences


@dataclass
class Job:
    """One request as the engine sees it: a shared prefix and the suffixes that continue it."""

    prefix: list[int]
    suffixes: list[list[int]]
    yes_ids: list[int]
    no_ids: list[int]
    margins: list[float] = field(default_factory=list)


def _logsumexp(values: list[float]) -> float:
    top = max(values)
    return top + math.log(sum(math.exp(v - top) for v in values))


class Engine:
    def __init__(
        self,
        model_path: Path,
        *,
        ctx: int = 8192,
        batch_tokens: int = 384,
        threads: int = 2,
        deterministic: bool = True,
        n_seq_max: int = 64,
        extra_cells: int = 0,
    ) -> None:
        lib = llama(deterministic)
        self.deterministic = deterministic
        self.ctx = ctx
        self.model = load_model(model_path, deterministic=deterministic)
        self.vocab = lib.llama_model_get_vocab(self.model)
        self.n_vocab = lib.llama_vocab_n_tokens(self.vocab)
        self.n_seq_max = n_seq_max
        cells = ctx + batch_tokens + WAVE_TOKENS + extra_cells
        cparams = lib.llama_context_default_params()
        cparams.n_ctx = -(-cells // 256) * 256
        cparams.n_batch = UBATCH if deterministic else 512
        cparams.n_ubatch = UBATCH if deterministic else 512
        cparams.n_seq_max = n_seq_max
        # llama.cpp keeps a full-vocabulary logits row per possible output (n_seq_max of them):
        # 64 rows of Gemma's 262k vocabulary are 67 MB, which is why n_seq_max is not 256.
        cparams.n_outputs_max = max(n_seq_max, cparams.n_batch)
        cparams.n_threads = threads
        cparams.n_threads_batch = threads
        cparams.flash_attn_type = lib.LLAMA_FLASH_ATTN_TYPE_ENABLED
        cparams.kv_unified = True  # sequences share cells, so a prefix copy costs nothing
        cparams.swa_full = True  # Gemma 3's sliding-window layers must keep whole prefixes
        cparams.no_perf = True
        self.ctx_ptr = lib.llama_init_from_model(self.model, cparams)
        if not self.ctx_ptr:
            raise RuntimeError("llama.cpp could not create a context")
        self.n_batch = cparams.n_batch
        self.max_batch_requests = n_seq_max // 2  # the other half holds suffixes
        self.mem = lib.llama_get_memory(self.ctx_ptr)
        self.batch = lib.llama_batch_init(self.n_batch, 0, 1)

    # --- tokens -----------------------------------------------------------------------
    def tokenize(self, text: str, *, add_bos: bool = False) -> list[int]:
        return tokenize(self.vocab, text, add_bos=add_bos)

    # --- reading ----------------------------------------------------------------------
    def _read(self, items: list[tuple[int, int, list[int], int | None]], on_logits) -> int:
        """Decode every item's tokens at their positions; for items with a job index, call
        on_logits(job_index, logits_ptr) once its last token is decoded. Returns tokens read."""
        lib = llama()
        stream: list[tuple[int, int, int, int | None]] = []  # token, pos, seq, job|None
        for seq, start, tokens, job in items:
            for i, tok in enumerate(tokens):
                last = job if (job is not None and i == len(tokens) - 1) else None
                stream.append((tok, start + i, seq, last))
        if not stream:
            return 0
        sizes = (
            piece_sizes(len(stream), UBATCH)
            if self.deterministic
            else [min(self.n_batch, len(stream) - i) for i in range(0, len(stream), self.n_batch)]
        )
        at = 0
        b = self.batch
        for size in sizes:
            outputs: list[tuple[int, int]] = []
            for row, (tok, pos, seq, job) in enumerate(stream[at : at + size]):
                b.token[row] = tok
                b.pos[row] = pos
                b.n_seq_id[row] = 1
                b.seq_id[row][0] = seq
                b.logits[row] = job is not None
                if job is not None:
                    outputs.append((job, row))
            b.n_tokens = size
            rc = lib.llama_decode(self.ctx_ptr, b)
            if rc != 0:
                raise RuntimeError(f"llama_decode returned {rc}")
            for job, row in outputs:
                on_logits(job, lib.llama_get_logits_ith(self.ctx_ptr, row))
            at += size
        return len(stream)

    def run(self, jobs: list[Job]) -> int:
        """Answer every job (fills job.margins). Returns the number of tokens read."""
        lib = llama()
        lib.llama_memory_clear(self.mem, True)
        if len(jobs) >= self.n_seq_max:
            raise ValueError("more requests in one batch than sequences")
        read = self._read([(seq, 0, job.prefix, None) for seq, job in enumerate(jobs)], None)
        # Every suffix continues its prefix in a sequence of its own; they run in waves
        # bounded by free sequences and WAVE_TOKENS so the cache never overflows.
        pending = [(j, s) for j, job in enumerate(jobs) for s in range(len(job.suffixes))]
        for job in jobs:
            job.margins = [math.nan] * len(job.suffixes)
        free_seqs = list(range(len(jobs), self.n_seq_max))
        slots: dict[int, tuple[int, int]] = {}
        while pending:
            wave, tokens = [], 0
            while pending and len(wave) < len(free_seqs) and (not wave or tokens < WAVE_TOKENS):
                j, s = pending.pop(0)
                wave.append((free_seqs[len(wave)], j, s))
                tokens += len(jobs[j].suffixes[s])
            # A lone one-token suffix would make a one-row micro-batch: re-read the prefix's
            # last token with it instead (same result, two rows).
            back = 1 if self.deterministic and tokens == 1 else 0
            items = []
            for k, (seq, j, s) in enumerate(wave):
                cut = len(jobs[j].prefix) - back
                lib.llama_memory_seq_cp(self.mem, j, seq, 0, cut)
                slots[k] = (j, s)
                items.append((seq, cut, jobs[j].prefix[cut:] + jobs[j].suffixes[s], k))

            def take(k: int, logits) -> None:
                j, s = slots[k]
                job = jobs[j]
                yes = _logsumexp([logits[t] for t in job.yes_ids])
                no = _logsumexp([logits[t] for t in job.no_ids])
                job.margins[s] = yes - no

            read += self._read(items, take)
            for seq, _, _ in wave:
                lib.llama_memory_seq_rm(self.mem, seq, -1, -1)
        return read


