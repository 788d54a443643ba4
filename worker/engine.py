"""One llama.cpp model and context, driven through llama-cpp-python's low-level API.

The engine reads a batch of requests: each request's prefix (preamble + state) into a working
sequence of its own, starting from a state snapshot when one matches (worker/snapshots.py),
then every suffix (one per yes/no job) into a sequence that starts as a copy of its prefix, the
leading tokens that suffixes of one prefix have in common read once into cells they all see.
Only the last token of each suffix is an output row, and llama.cpp's graph stops at its final
hidden state (worker/hidden.py): the answer's few logits columns, the yes/no tokens or a learned
head's (worker/head.py), are computed from it, the 262k-column output row never is.

Deterministic mode (the default) makes a P(yes) independent of batch mates, prompt cuts and
snapshots (docs/architecture.md): flash attention on; a prefix longer than 512 tokens read in a
context of its own (worker/tiled_reader.py: from position 512 on through flash attention's tiled
kernel), shorter ones and the question rows here in micro-batches of 8 to 60 rows in steps of 4
padded with throwaway rows (worker/pieces.py), each sequence's KV cells in position order
(worker/snapshots.py). Only the model thread (worker/model_thread.py) may call into an Engine
or read its parts; other threads (heartbeats) read only `status` (worker/status.py), which it
replaces after each batch.
"""
from __future__ import annotations

import ctypes
import math
from pathlib import Path
from typing import Any

import numpy as np

from shared.config import Settings
from shared.llama import MAX_STATE_CACHE, N_WORK, llama, load_model, restore_sequence, save_sequence, tokenize
from worker.head import Head, Readout
from worker.hidden import HiddenTap, OutputMatrix
from worker.job import Job
from shared.memory import WAVE_TOKENS, context_cells, model_shape, snapshot_tokens as budget_tokens
from worker.pieces import UBATCH, Row, output_rows, piece_sizes, shared_rows, suffix_waves, token_rows
from worker.snapshots import SnapshotCache
from worker.status import status_of
from worker.tiled_reader import TiledReader

KV_TYPES = {"f32": 0, "f16": 1}  # the kv_cache_type setting -> ggml_type (GGML_TYPE_F32, GGML_TYPE_F16)


class Engine:
    def __init__(
        self,
        model_path: Path,
        *,
        ctx: int,
        batch_tokens: int,
        threads: int,
        deterministic: bool,
        state_cache: int,
        state_cache_tokens: int,
        state_cache_second_miss: bool = True,
        state_cache_ram_mb: int = 0,
        head: Head | None = None,
        kv_cache_type: str = "f16",
    ) -> None:
        """Sizes: the settings of the same names (from_settings); the snapshots' cells are
        state_cache_tokens (shared/memory.snapshot_tokens gives the settings' budget in tokens);
        head: a learned readout, not yes−no; kv_cache_type: "f32" only for bench-exact (no
        setting: it changes no margin beyond the model's own spread, docs/architecture.md, and a
        stock llama.cpp casts it to F16 anyway)."""
        if not 0 <= state_cache <= MAX_STATE_CACHE:  # checked before a model is loaded for nothing
            raise ValueError(f"state_cache must be 0..{MAX_STATE_CACHE}, not {state_cache}")
        lib = llama()
        self.deterministic = deterministic
        self.arithmetic = ""  # the start-up canary's digest of its probe's answer bits (worker/canary.py)
        self.model = load_model(model_path)
        self.vocab = lib.llama_model_get_vocab(self.model)
        self.n_vocab = lib.llama_vocab_n_tokens(self.vocab)
        self.tap = HiddenTap(lib.llama_model_n_embd(self.model))  # each output row's final hidden state
        self.readout = Readout(OutputMatrix(model_path, n_vocab=self.n_vocab, n_embd=self.tap.n_embd), head)
        self.n_seq_max = N_WORK + state_cache
        # Cells: snapshots, one batch's reads (prefixes or one long request), a suffix wave, padding.
        cparams = lib.llama_context_default_params()
        cparams.n_ctx = context_cells(ctx, batch_tokens, state_cache_tokens if state_cache else 0)
        cparams.n_batch = UBATCH if deterministic else 512
        cparams.n_ubatch = UBATCH if deterministic else 512
        cparams.n_seq_max = self.n_seq_max
        # llama.cpp keeps a full-vocabulary logits row per sequence (1 MB each with Gemma's
        # 262k vocabulary), snapshot sequences included, which is why N_WORK is not 256.
        cparams.n_outputs_max = max(self.n_seq_max, cparams.n_batch)
        cparams.n_threads = threads
        cparams.n_threads_batch = threads
        cparams.flash_attn_type = lib.LLAMA_FLASH_ATTN_TYPE_ENABLED
        cparams.type_k = cparams.type_v = KV_TYPES[kv_cache_type]
        cparams.kv_unified = True  # sequences share cells, so a prefix copy costs nothing
        cparams.swa_full = True  # Gemma 3's sliding-window layers must keep whole prefixes
        cparams.no_perf = True
        cparams.cb_eval = self.tap.callback
        self.ctx_ptr = lib.llama_init_from_model(self.model, cparams)
        if not self.ctx_ptr:
            raise RuntimeError("llama.cpp could not create a context")
        self.n_batch = cparams.n_batch
        self.scratch = N_WORK - 1  # padding rows; warm calls
        self.max_batch_requests = (N_WORK - 1) // 2  # the other half holds suffixes
        self.mem = lib.llama_get_memory(self.ctx_ptr)
        self.batch = lib.llama_batch_init(self.n_batch, 0, N_WORK)  # a prefix token: up to N_WORK sequences
        self.decode_calls = 0  # llama_decode calls that read requests, the tiled reader's too
        self.reader = TiledReader(self.model, ctx=ctx, threads=threads, kv_type=cparams.type_k) if deterministic else None
        self.tiled_from = self.reader.tiled_from if self.reader else ctx  # longer prefixes: the reader's
        self.cache = SnapshotCache(self, seqs=range(N_WORK, self.n_seq_max), max_entries=state_cache,
                                   max_tokens=state_cache_tokens, n_swa=lib.llama_model_n_swa(self.model),
                                   second_miss=state_cache_second_miss, spill_bytes=state_cache_ram_mb << 20)
        self.status = status_of(self.cache)

    @classmethod
    def from_settings(cls, model_path: Path, settings: Settings, *, threads: int, head: Head | None = None,
                      snapshot_tokens: int | None = None) -> Engine:
        """The engine the settings describe: how workers, `decide`, the tests and benches build one.
        The snapshots' cells are the settings' budget in this model's tokens (memory.snapshot_tokens);
        tests and benches that need an exact token budget give it as snapshot_tokens."""
        if snapshot_tokens is None:
            snapshot_tokens = budget_tokens(settings, model_shape(model_path))
        return cls(model_path, ctx=settings.ctx, batch_tokens=settings.batch_tokens, threads=threads,
                   deterministic=settings.mode == "deterministic", state_cache=settings.state_cache,
                   state_cache_tokens=snapshot_tokens, head=head,
                   state_cache_second_miss=settings.state_cache_admission == "second-miss",
                   state_cache_ram_mb=settings.state_cache_ram_mb)

    def close(self) -> None:
        """Free the context and the model (a process that exits need not call this)."""
        lib = llama()
        if self.ctx_ptr:
            lib.llama_batch_free(self.batch)
            if self.reader:
                self.reader.close()
            lib.llama_free(self.ctx_ptr)
            lib.llama_model_free(self.model)
            self.ctx_ptr = None

    def tokenize(self, text: str, *, add_bos: bool = False, special: bool = False) -> list[int]:
        return tokenize(self.vocab, text, add_bos=add_bos, special=special)

    # --- cells (the snapshot cache's backend) -------------------------------------------
    def copy(self, src: int, dst: int, length: int) -> None:
        llama().llama_memory_seq_cp(self.mem, src, dst, 0, length)

    def remove(self, seq: int, p0: int = -1, p1: int = -1) -> None:
        llama().llama_memory_seq_rm(self.mem, seq, p0, p1)

    def save(self, seq: int) -> ctypes.Array:
        return save_sequence(self.ctx_ptr, seq)

    def restore(self, seq: int, blob: ctypes.Array) -> None:
        restore_sequence(self.ctx_ptr, seq, blob)

    def pos_min(self, seq: int) -> int:
        return llama().llama_memory_seq_pos_min(self.mem, seq)

    # --- reading ----------------------------------------------------------------------
    def decode_shapes(self, n_tokens: int) -> list[int]:
        """Rows of each llama_decode call that reading n_tokens new tokens makes."""
        if self.deterministic:
            return piece_sizes(max(1, n_tokens), UBATCH)
        return [min(self.n_batch, n_tokens - i) for i in range(0, n_tokens, self.n_batch)]

    def _read(self, stream: list[Row], on_output) -> int:
        """Decode every (token, position, seqs, keys) row, the token in every sequence of seqs;
        for each key of a row, call on_output(key, hidden, full) with the row's final hidden state
        once it is decoded (full: llama.cpp's logits row when tap.full_logits, else None).
        Returns tokens read."""
        if not stream:
            return 0
        shapes = self.decode_shapes(len(stream))
        padded = sum(shapes) - len(stream)  # throwaway rows that fill the last piece
        stream = stream + [(stream[0][0], pos, (self.scratch,), ()) for pos in range(padded)]
        at = 0
        for size in shapes:
            outputs, n_out = self._fill(stream[at : at + size])
            rc = llama().llama_decode(self.ctx_ptr, self.batch)
            if rc != 0:
                raise RuntimeError(f"llama_decode returned {rc}")
            self.decode_calls += 1
            hidden = self.tap.take(n_out)
            full = self._logits_rows(n_out) if self.tap.full_logits else None
            for key, i in outputs:
                on_output(key, hidden[i], None if full is None else full[i])
            at += size
        if padded:
            self.remove(self.scratch)
        return len(stream) - padded

    def _logits_rows(self, n_out: int) -> np.ndarray:
        """llama.cpp's logits rows of the last call's outputs, in batch order (a view of its buffer)."""
        if not n_out:
            return np.empty((0, self.n_vocab), np.float32)
        return np.ctypeslib.as_array(llama().llama_get_logits(self.ctx_ptr), shape=(n_out, self.n_vocab))

    def _fill(self, rows: list[Row]) -> tuple[list[tuple[Any, int]], int]:
        """Rows into the batch; returns (key, index among the output rows) per key, output rows.
        Deterministic mode flags rows without keys as outputs too (the last ones first), as many
        as make the output rows a shape of the rule (pieces.output_rows)."""
        flags = [bool(keys) for _, _, _, keys in rows]
        extra = output_rows(sum(flags), len(rows)) - sum(flags) if self.deterministic else 0
        for row in reversed(range(len(rows))):
            if extra and not flags[row]:
                flags[row], extra = True, extra - 1
        b, outputs, n_out = self.batch, [], 0
        for row, (tok, pos, seqs, keys) in enumerate(rows):
            b.token[row], b.pos[row], b.n_seq_id[row], b.logits[row] = tok, pos, len(seqs), flags[row]
            for n, seq in enumerate(seqs):
                b.seq_id[row][n] = seq
            outputs.extend((key, n_out) for key in keys)
            n_out += flags[row]
        b.n_tokens = len(rows)
        self.tap.hidden = None
        return outputs, n_out

    def new_tokens(self, job: Job, earlier: list[Job]) -> int:
        """Tokens `job` would read in a batch after `earlier`: its prefix beyond any snapshot
        or batch mate's identical prefix, plus its suffixes. For the scheduler's budget."""
        prefix = self.cache.estimate(job.prefix, [e.prefix for e in earlier])
        return prefix + job.suffix_reads

    def run(self, jobs: list[Job], *, warm: bool = False) -> int:
        """Answer every job (fills job.margins and job.reused); returns the tokens read. A warm
        run (warmup) leaves no snapshot behind. Prefixes and the first wave of suffixes are read
        in one stream, each prefix token also in the sequences of that wave's suffixes of it (W1:
        44 rows in one call), unless a batch mate copies another's prefix (plan.copies); a prefix
        that reaches the tiled reader's positions (tails) is read there first."""
        if len(jobs) > self.max_batch_requests:
            raise ValueError("more requests in one batch than sequences")
        work = list(range(len(jobs)))
        for job in jobs:
            job.margins = [math.nan] * len(job.suffixes)
        waves = suffix_waves([[len(x) for x in job.suffixes] for job in jobs], range(len(jobs), self.scratch),
                             WAVE_TOKENS)
        try:
            plan = self.cache.begin([job.prefix for job in jobs], work, warm=warm)
            tails = {seq: len(tokens) for seq, start, tokens in plan.reads if start + len(tokens) > self.tiled_from}
            for seq, start, _ in plan.reads:  # tails whole by the tiled reader first: their suffixes join the first wave
                if seq in tails:
                    plan.windows[seq] = self.reader.read_into(self, seq, start, plan.prefixes[plan.work.index(seq)])
            first = waves.pop(0) if waves and not plan.copies else []
            sharing: dict[int, tuple[int, ...]] = {}
            for seq, j, _ in first:
                self.copy(j, seq, len(jobs[j].prefix))  # the cells it has before its read: preamble, snapshot
                sharing[j] = sharing.get(j, ()) + (seq,)
            reads = [row for seq, start, tokens in plan.reads if seq not in tails
                     for row in token_rows((seq, *sharing.get(seq, ())), start, tokens)]
            read = sum(tails.values()) + self._read_wave(jobs, first, reads)
            for src, dst, n in plan.copies:
                self.copy(src, dst, n)
            for job, reused in zip(jobs, plan.reused):
                job.reused = reused
            for wave in waves:
                for seq, j, _ in wave:
                    self.copy(j, seq, len(jobs[j].prefix))
                read += self._read_wave(jobs, wave)
            self.cache.end(plan)
        except BaseException:
            for seq in range(N_WORK):
                self.remove(seq)
            self.cache.lost_placement()
            raise
        finally:
            self.status = status_of(self.cache)  # replaced whole: see the top comment
        for seq in work:
            self.remove(seq)
        return read

    def _read_wave(self, jobs: list[Job], wave: list[tuple[int, int, int]], before: list[Row] | None = None) -> int:
        """Read `before` (prefix rows) and then the wave's suffixes, taking each suffix's margin;
        the suffixes of one job share the rows of their common leading tokens (pieces.shared_rows).
        The wave's sequences are removed afterwards."""
        by_job: dict[int, list[tuple[int, list[int], int]]] = {}
        for k, (seq, j, s) in enumerate(wave):
            by_job.setdefault(j, []).append((seq, jobs[j].suffixes[s], k))
        rows = list(before or [])
        for j, suffixes in by_job.items():
            start = len(jobs[j].prefix)
            rows += [(tok, start + depth, seqs, keys) for tok, depth, seqs, keys in shared_rows(suffixes)]

        def take(k: int, hidden: np.ndarray, full: np.ndarray | None) -> None:
            _, j, s = wave[k]
            jobs[j].margins[s] = self.readout.margin(jobs[j], s, hidden, full)

        read = self._read(rows, take)
        for seq, _, _ in wave:
            self.remove(seq)
        return read

    # --- snapshots and warmup -----------------------------------------------------------
    def pin(self, tokens: list[int]) -> None:
        """Read `tokens` (the profile's preamble) and keep them for good. First thing after
        loading, so the preamble's cells are the lowest and never need to move."""
        if not self.cache.enabled or len(tokens) < self.cache.min_tokens:
            return
        if len(tokens) > self.tiled_from:
            self.reader.read_into(self, 0, 0, tokens)
        else:
            self._read(token_rows((0,), 0, tokens), None)
        self.cache.pin(tokens, 0)
        self.remove(0)
        seq = self.cache.entries[0].seq
        self.cache.token_bytes = llama().llama_state_seq_get_size(self.ctx_ptr, seq) // len(tokens)
        self.status = status_of(self.cache)
