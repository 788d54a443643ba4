"""What one worker of a model file needs in memory, in bytes, before anything is loaded: so that
budgets are set in bytes whatever the model (a token of KV cache is 18 KB with Gemma 3 270M, 32 KB
with Llama 3.2 1B, 384 KB with Phi-3.5-mini), the default worker count follows memory as well as
cores, and a fleet that cannot fit is refused at start with the figures instead of swapping.

Everything is read from the GGUF header (ggml's reader, milliseconds): the layer count, the K and
V widths of each layer, the vocabulary's size and the file's size. The estimate counts, per
worker: the weights (the whole file: llama.cpp repacks most quantized weights into memory of the
process's own, so workers do not share them through the page cache; the file's own pages, which
they do share, count once more for the host), the KV cells of its context
(worker/engine.py sizes them) and, in deterministic mode, of its tiled reader's (one longest
prompt, worker/tiled_reader.py), its host-memory tier (state_cache_ram_mb) and llama.cpp's logits
rows. llama.cpp's compute buffers come on top, a few percent for these batch sizes (Qwen2.5 1.5B:
47 MiB the engine's, 73 MiB the tiled reader's 512-row calls): HEADROOM.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from shared.config import Settings, replace
from shared.gguf_file import UNREADABLE, ModelFileError
from shared.gguf_header import GgufHeader
from shared.llama import FA_TILE, MAX_STATE_CACHE, N_WORK

KV_ELEMENT_BYTES = 2  # llama.cpp's default K and V cache type, F16
WAVE_TOKENS = 512  # suffix tokens the engine decodes per wave of sequences (cells are kept for one wave)
HEADROOM = 1.10  # compute buffers and allocator slack over the sum of the parts
MIB = 1 << 20
SNAPSHOT_MIB = 144  # state_cache_mb 0: the snapshot space's size for a model of small KV (8,192 Gemma 3 270M tokens)
SNAPSHOT_TOKENS = 4096  # ... and at least this many tokens of any model's (five W3 states of ~700 tokens)
CELLS_STEP = 256  # a context's cells are asked for in multiples of this
LONGROPE_CTX = 2048  # state_cache_mb 0, LongRoPE file: prompts this long fit its window beside the snapshots


class MemoryRefusal(RuntimeError):
    """The fleet asked for does not fit this host's memory; the message gives the figures."""


@dataclass(frozen=True)
class ModelShape:
    file_bytes: int
    n_layer: int
    kv_widths: tuple[int, ...]  # per layer: K width + V width (heads × head size), elements
    n_vocab: int
    n_ctx_train: int
    short_context: int = 0  # a LongRoPE file's (Phi-3.5) original context: its short factors' reach; 0 = none

    @property
    def kv_bytes_per_token(self) -> int:
        """Bytes one token's K and V take across every layer, in llama.cpp's default F16 cache."""
        return sum(self.kv_widths) * KV_ELEMENT_BYTES


def model_shape(path: Path) -> ModelShape:
    """The figures of `path` that memory depends on, from its header."""
    with GgufHeader(path) as header:
        if header is None:
            raise ModelFileError(UNREADABLE.format(path))  # one line, exit 2
        arch = header.string("general.architecture")
        n_layer = header.u32(f"{arch}.block_count")
        n_embd = header.u32(f"{arch}.embedding_length")
        n_head = header.per_layer(f"{arch}.attention.head_count", n_layer, 1)
        n_head_kv = header.per_layer(f"{arch}.attention.head_count_kv", n_layer, 0)
        head = n_embd // max(n_head[0], 1)
        k = header.u32(f"{arch}.attention.key_length", head)
        v = header.u32(f"{arch}.attention.value_length", head)
        widths = tuple((kv or h) * (k + v) for kv, h in zip(n_head_kv, n_head))
        n_vocab = header.count("tokenizer.ggml.tokens")
        n_ctx_train = header.u32(f"{arch}.context_length", 0)
        long_rope = header.tensor("rope_factors_long.weight") is not None
        short = header.u32(f"{arch}.rope.scaling.original_context_length", n_ctx_train) if long_rope else 0
    return ModelShape(path.stat().st_size, n_layer, widths, n_vocab, n_ctx_train, short)


def tokens_in(mib: int, shape: ModelShape) -> int:
    """How many tokens of this model's KV cache `mib` MiB hold."""
    return (mib * MIB) // shape.kv_bytes_per_token


def snapshot_tokens(settings: Settings, shape: ModelShape) -> int:
    """The snapshot cells' budget in tokens: state_cache_mb's worth of this model's KV cache, or
    when it is 0 (the default) SNAPSHOT_MIB's worth but never fewer than SNAPSHOT_TOKENS. Why
    the floor: a state longer than the budget is never kept, nor restored from host memory (it
    needs cells to land in), so every question about it reads it again; 144 MiB holds 8,192
    tokens of Gemma 3 270M but 384 of Phi-3.5-mini (384 KiB a token), fewer than one W3 state
    (~700 tokens). A LongRoPE file's default budget is what its short factors' window leaves
    once prompts of LONGROPE_CTX tokens fit (within_short_factors)."""
    if not settings.state_cache:
        return 0
    if settings.state_cache_mb:
        return tokens_in(settings.state_cache_mb, shape)
    tokens = max(tokens_in(SNAPSHOT_MIB, shape), SNAPSHOT_TOKENS)
    if shape.short_context:
        prompts = context_cells(min(settings.ctx, LONGROPE_CTX), settings.batch_tokens, 0)
        tokens = min(tokens, max(0, shape.short_context - prompts))
    return tokens


def context_cells(ctx: int, batch_tokens: int, snapshot_cells: int) -> int:
    """The KV cells of a worker's context, as worker/engine.py asks llama.cpp for them: one longest
    prompt, a batch's reads, a wave of suffixes, padding rows and the snapshots, in 256s."""
    cells = ctx + batch_tokens + WAVE_TOKENS + N_WORK + snapshot_cells
    return -(-cells // CELLS_STEP) * CELLS_STEP


def reader_cells(ctx: int) -> int:
    """KV cells of the tiled reader's context (worker/tiled_reader.py): the longest prompt and a
    last piece's padding (at most one tile), in CELLS_STEPs."""
    return -(-(ctx + FA_TILE) // CELLS_STEP) * CELLS_STEP


def worker_bytes(settings: Settings, shape: ModelShape) -> dict[str, int]:
    """One worker's memory by part, bytes (HEADROOM not included)."""
    n_outputs = max(N_WORK + min(settings.state_cache, MAX_STATE_CACHE), 64)
    return {"weights": shape.file_bytes,
            "KV cells": context_cells(settings.ctx, settings.batch_tokens, snapshot_tokens(settings, shape))
                        * shape.kv_bytes_per_token,
            "tiled reader's cells": (reader_cells(settings.ctx) if settings.mode == "deterministic" else 0)
                                    * shape.kv_bytes_per_token,
            "host-memory tier": settings.state_cache_ram_mb * MIB,
            "logits rows": n_outputs * shape.n_vocab * 4}


CGROUP_FILES = (("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),  # v2
                ("/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory/memory.usage_in_bytes"))  # v1


def available_bytes() -> int:
    """Memory this process may still use: MemAvailable, or what its cgroup's limit leaves when
    that is less (a container or pod)."""
    with open("/proc/meminfo") as fh:
        meminfo = {line.split(":")[0]: int(line.split()[1]) * 1024 for line in fh}
    free = meminfo.get("MemAvailable", meminfo.get("MemFree", 0))
    for limit_file, usage_file in CGROUP_FILES:
        try:
            limit, usage = Path(limit_file).read_text().strip(), Path(usage_file).read_text().strip()
        except OSError:
            continue
        if limit.isdigit() and usage.isdigit():
            free = min(free, max(0, int(limit) - int(usage)))
    return free


def within_trained_context(settings: Settings, shape: ModelShape, name: str) -> Settings:
    """`settings` with ctx (the longest prompt) lowered to the trained context of the file `name`
    when it is above it, said on stderr: no position is ever past what the model was trained on
    (llama.cpp only warns). Applied where settings meet a model file (shared/plan.py), before
    memory is planned and a gateway or worker reads ctx, so both refuse the same prompts."""
    trained = shape.n_ctx_train
    if trained and settings.ctx > trained:
        print(f"jevfleet: ctx {settings.ctx} is above {name}'s trained context; prompts are limited to its "
              f"{trained} tokens", file=sys.stderr, flush=True)
        settings = replace(settings, ctx=trained)
    return within_short_factors(settings, shape, name)


def within_short_factors(settings: Settings, shape: ModelShape, name: str) -> Settings:
    """A LongRoPE file (Phi-3.5: rope_factors_long and _short) is read with its long factors by
    llama.cpp whenever the context's cells exceed the file's original context (4,096), whatever
    the prompt's length, while the model was trained to read a prompt that short with the short
    ones: every answer moved (a median 1.29 nats on the zoo's Phi-3.5-mini, where the exact
    reading, a small context, took the short ones). So ctx is lowered until the worker's cells
    fit in the original context, said on stderr."""
    if not shape.short_context:
        return settings
    others = context_cells(0, settings.batch_tokens, snapshot_tokens(settings, shape))
    most = shape.short_context - others  # both multiples of 256 after context_cells' rounding
    if settings.ctx <= most:
        return settings
    if most < 256:
        raise MemoryRefusal(f"{name} reads with its short RoPE factors only within {shape.short_context} cells, and "
                            f"batch_tokens and state_cache_mb take {others} of them: lower them")
    print(f"jevfleet: {name} reads its short RoPE factors only while the context has at most "
          f"{shape.short_context} cells; prompts are limited to {most} tokens", file=sys.stderr, flush=True)
    return replace(settings, ctx=most)


def plan_workers(settings: Settings, shape: ModelShape, name: str, available: int | None = None) -> int:
    """How many workers of the file `name` to start: `workers` when set, else one per
    cores_per_worker cores as many as fit in memory; MemoryRefusal, with the figures, when not
    even those asked for fit."""
    parts = worker_bytes(settings, shape)
    need = int(sum(parts.values()) * HEADROOM)
    free = available_bytes() if available is None else available
    by_cores = settings.worker_count
    fits = max(0, free - shape.file_bytes) // need  # the file's pages: once, shared by every worker
    workers = settings.workers or min(by_cores, fits)
    if workers < 1 or workers > fits:
        detail = ", ".join(f"{name} {size / MIB:,.0f}" for name, size in parts.items())
        raise MemoryRefusal(
            f"{max(workers, 1)} worker(s) of {name} need {need / MIB:,.0f} MiB each ({detail} MiB, "
            f"+{HEADROOM - 1:.0%} for llama.cpp's buffers; a token of KV cache is "
            f"{shape.kv_bytes_per_token / 1024:,.0f} KiB), besides the file's {shape.file_bytes / MIB:,.0f} MiB "
            f"in the page cache once, and {free / MIB:,.0f} MiB is available: lower ctx, "
            f"state_cache_mb or state_cache_ram_mb, or workers")
    return workers
