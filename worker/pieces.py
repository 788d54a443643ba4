"""How a stream of new tokens is cut into llama_decode calls.

Deterministic mode needs every micro-batch to hold 2..n_ubatch tokens: ggml's CPU backend
takes other code paths for one-row batches (and for >= 64 rows), which changes the last bits of
the logits. Cutting the stream ourselves keeps llama.cpp from ever making such a micro-batch.
"""
from __future__ import annotations


def piece_sizes(total: int, ubatch: int) -> list[int]:
    """Sizes in [2, ubatch] that add up to `total` (>= 2), as few pieces as possible."""
    if total < 2:
        raise ValueError("a decode needs at least two tokens in deterministic mode")
    if ubatch < 3:
        raise ValueError("ubatch must be at least 3")
    full, rest = divmod(total, ubatch)
    sizes = [ubatch] * full + ([rest] if rest else [])
    if sizes[-1] == 1:  # 33 -> 17 + 16, never a lone token
        sizes[-2:] = [(ubatch + 2) // 2, ubatch + 1 - (ubatch + 2) // 2]
    return sizes
