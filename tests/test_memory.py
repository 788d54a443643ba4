"""shared/memory.py: a worker's bytes from a GGUF header, snapshots' budget in this model's tokens,
and how many workers serve starts or why it refuses (headers written by the gguf package; no model)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from gguf import GGUFValueType, GGUFWriter

from shared.config import default_settings
from shared.memory import (MIB, MemoryRefusal, context_cells, model_shape, plan_workers, snapshot_tokens,
                           within_trained_context, worker_bytes)


def header(path: Path, arch: str, *, layers: int, embd: int, heads: int, kv_heads: int | list[int],
           key_length: int = 0, vocab: int = 1000, ctx_train: int = 8192, long_rope_from: int = 0) -> Path:
    """A GGUF with the hyperparameters memory depends on and one small tensor."""
    writer = GGUFWriter(str(path), arch)
    writer.add_block_count(layers)
    writer.add_embedding_length(embd)
    writer.add_head_count(heads)
    writer.add_head_count_kv(kv_heads)
    writer.add_context_length(ctx_train)
    if key_length:
        writer.add_key_length(key_length)
        writer.add_value_length(key_length)
    writer.add_token_list([f"t{i}" for i in range(vocab)])
    writer.add_tensor("token_embd.weight", np.zeros((4, 8), dtype=np.float32))
    if long_rope_from:  # Phi-3.5's LongRoPE: two sets of factors, the long ones past this context
        writer.add_key_value(f"{arch}.rope.scaling.original_context_length", long_rope_from, GGUFValueType.UINT32)
        for which in ("long", "short"):
            writer.add_tensor(f"rope_factors_{which}.weight", np.ones(embd // heads // 2, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


@pytest.fixture
def llama_1b(tmp_path) -> Path:  # Llama 3.2 1B's shape: 16 layers, 2048 wide, 32 heads, 8 of K/V
    return header(tmp_path / "llama.gguf", "llama", layers=16, embd=2048, heads=32, kv_heads=8, vocab=128256)


def test_a_token_of_kv_cache_is_what_the_layers_make_it(llama_1b, tmp_path):
    shape = model_shape(llama_1b)
    assert shape.kv_bytes_per_token == 16 * 8 * 64 * 2 * 2 == 32 * 1024
    assert (shape.n_layer, shape.n_vocab, shape.n_ctx_train) == (16, 128256, 8192)
    # Gemma 3 270M: heads of 256 though 640 / 4 is 160 (key_length says so): 18 KiB a token.
    gemma = model_shape(header(tmp_path / "gemma.gguf", "gemma3", layers=18, embd=640, heads=4, kv_heads=1,
                               key_length=256))
    assert gemma.kv_bytes_per_token == 18 * 1024
    # K/V heads given per layer (OpenELM-like): each layer counts its own.
    uneven = model_shape(header(tmp_path / "uneven.gguf", "llama", layers=3, embd=256, heads=4, kv_heads=[1, 2, 4]))
    assert uneven.kv_bytes_per_token == (1 + 2 + 4) * 64 * 2 * 2


def test_the_snapshot_budget_is_bytes_and_becomes_the_models_tokens(llama_1b, tmp_path):
    settings = default_settings()
    assert snapshot_tokens(settings, model_shape(llama_1b)) == 144 * MIB // (32 * 1024) == 4608
    gemma = model_shape(header(tmp_path / "gemma.gguf", "gemma3", layers=18, embd=640, heads=4, kv_heads=1,
                               key_length=256))
    assert snapshot_tokens(settings, gemma) == 8192  # the default keeps Gemma's earlier 8,192 tokens
    assert snapshot_tokens(default_settings(state_cache=0), gemma) == 0
    cells = context_cells(settings.ctx, settings.batch_tokens, 8192)
    assert cells % 256 == 0 and cells >= settings.ctx + settings.batch_tokens + 8192
    parts = worker_bytes(settings, gemma)
    assert parts["KV cells"] == cells * 18 * 1024
    assert parts["host-memory tier"] == settings.state_cache_ram_mb * MIB


def test_the_default_snapshot_budget_holds_a_few_states_of_a_large_kv_model(tmp_path):
    # MiniCPM 1B's shape: 52 layers of 8 K/V heads of 64, 104 KiB a token; 144 MiB would hold 1,417
    # tokens, fewer than two W3 states, so the default gives it 4,096 (416 MiB).
    minicpm = model_shape(header(tmp_path / "minicpm.gguf", "minicpm", layers=52, embd=1536, heads=24, kv_heads=8))
    assert minicpm.kv_bytes_per_token == 104 * 1024
    assert snapshot_tokens(default_settings(), minicpm) == 4096
    assert worker_bytes(default_settings(), minicpm)["KV cells"] == context_cells(8192, 384, 4096) * 104 * 1024
    assert snapshot_tokens(default_settings(state_cache_mb=144), minicpm) == 1417  # asked for: exactly that
    # Phi-3.5-mini (LongRoPE, window 4,096 cells): what the window leaves once 2,048-token prompts fit.
    phi = header(tmp_path / "phi.gguf", "phi3", layers=32, embd=3072, heads=32, kv_heads=32, ctx_train=131072,
                 long_rope_from=4096)
    settings = within_trained_context(default_settings(), model_shape(phi), phi.name)
    kept = snapshot_tokens(settings, model_shape(phi))
    assert settings.ctx == 2048 and kept == 1024
    assert context_cells(settings.ctx, settings.batch_tokens, kept) <= 4096


def test_workers_follow_memory_as_well_as_cores(llama_1b):
    settings = default_settings(cores_per_worker=1)
    need = int(sum(worker_bytes(settings, model_shape(llama_1b)).values()) * 1.10)
    by_cores = settings.worker_count
    assert plan_workers(settings, model_shape(llama_1b), llama_1b.name, available=100 * need) == by_cores
    file = llama_1b.stat().st_size  # its pages in the page cache, once for every worker
    assert plan_workers(settings, model_shape(llama_1b), llama_1b.name, available=file + need + 1) == 1
    with pytest.raises(MemoryRefusal, match=r"1 worker\(s\) of llama.gguf need .* MiB each .*KV cells .* MiB is available"):
        plan_workers(settings, model_shape(llama_1b), llama_1b.name, available=file + need - 1)
    with pytest.raises(MemoryRefusal, match=r"^3 worker\(s\)"):
        plan_workers(default_settings(workers=3), model_shape(llama_1b), llama_1b.name, available=file + 2 * need)


def test_a_containers_limit_less_its_usage_bounds_the_memory_available(tmp_path, monkeypatch):
    import shared.memory as memory

    (tmp_path / "max").write_text(f"{3 << 30}\n")
    (tmp_path / "current").write_text(f"{1 << 30}\n")
    (tmp_path / "unlimited").write_text("max\n")
    host = memory.available_bytes()
    monkeypatch.setattr(memory, "CGROUP_FILES", ((str(tmp_path / "unlimited"), str(tmp_path / "current")),))
    assert memory.available_bytes() == pytest.approx(host, rel=0.05)  # "max": no limit, MemAvailable counts
    monkeypatch.setattr(memory, "CGROUP_FILES", ((str(tmp_path / "max"), str(tmp_path / "current")),
                                                 (str(tmp_path / "absent"), str(tmp_path / "absent"))))
    assert host > 2 << 30 and memory.available_bytes() == 2 << 30  # 3 GiB allowed, 1 GiB used


def test_ctx_is_lowered_to_the_files_trained_context_and_never_raised(tmp_path, capsys):
    short = header(tmp_path / "short.gguf", "llama", layers=2, embd=256, heads=4, kv_heads=4, ctx_train=4096)
    assert within_trained_context(default_settings(ctx=8192), model_shape(short), short.name).ctx == 4096
    assert "limited to its 4096 tokens" in capsys.readouterr().err
    assert within_trained_context(default_settings(ctx=2048), model_shape(short), short.name).ctx == 2048
    assert capsys.readouterr().err == ""


def test_a_longrope_files_context_stays_within_its_short_factors_reach(tmp_path, capsys):
    phi = header(tmp_path / "phi.gguf", "phi3", layers=32, embd=3072, heads=32, kv_heads=32, ctx_train=131072,
                 long_rope_from=4096)
    settings = within_trained_context(default_settings(ctx=8192), model_shape(phi), phi.name)
    shape = model_shape(phi)
    assert shape.short_context == 4096 and 0 < settings.ctx < 4096
    assert context_cells(settings.ctx, settings.batch_tokens, snapshot_tokens(settings, shape)) <= 4096
    assert "short RoPE factors" in capsys.readouterr().err
    # within reach: as it was
    assert within_trained_context(default_settings(ctx=1024), model_shape(phi), phi.name).ctx == 1024
    assert model_shape(header(tmp_path / "llama.gguf", "llama", layers=2, embd=256, heads=4, kv_heads=4)).short_context == 0
    with pytest.raises(MemoryRefusal, match="short RoPE factors"):
        within_trained_context(default_settings(state_cache_mb=2000), model_shape(phi), phi.name)
