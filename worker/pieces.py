"""How a stream of new tokens is cut into llama_decode calls, and suffixes into waves.

Deterministic mode needs every token row to take the same kernels, whatever else is in its
micro-batch, and ggml's CPU backend picks kernels by a micro-batch's row count
(docs/architecture.md has the list): repacked Q4_K weights multiply rows in groups of four and
the rows left over one by one, the tiled K-quant matmul starts at 8 rows, llamafile's sgemm at
2, and flash attention takes other paths for one row and for 64 or more. So every llama_decode
holds a multiple of ROW_STEP rows, at least MIN_ROWS and fewer than 64; a stream that does not
fill its last piece gets throwaway rows (the engine puts them in a scratch sequence). The output
rows of a call are a micro-batch of their own in the model's last layer, so their number follows
the same rule (output_rows).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

ROW_STEP = 4
MIN_ROWS = 8
UBATCH = 60  # deterministic micro-batch size: the largest multiple of ROW_STEP below 64


def piece_sizes(total: int, ubatch: int) -> list[int]:
    """Rows of each llama_decode that reads `total` (>= 1) tokens: multiples of ROW_STEP from
    MIN_ROWS to `ubatch`, as few as possible, adding up to `total` rounded up to a multiple of
    ROW_STEP (and to at least MIN_ROWS)."""
    if total < 1:
        raise ValueError("a decode needs at least one token")
    if ubatch < MIN_ROWS + ROW_STEP or ubatch % ROW_STEP:
        raise ValueError(f"ubatch must be a multiple of {ROW_STEP} above {MIN_ROWS}")
    rows = max(MIN_ROWS, -(-total // ROW_STEP) * ROW_STEP)
    full, rest = divmod(rows, ubatch)
    sizes = [ubatch] * full + ([rest] if rest else [])
    if sizes[-1] < MIN_ROWS:  # 64 rows -> 56 + 8 (with ubatch 60), never a piece of 4
        sizes[-2:] = [ubatch - MIN_ROWS + sizes[-1], MIN_ROWS]
    return sizes


def output_rows(wanted: int, rows: int) -> int:
    """How many of a micro-batch's `rows` to flag as output rows when `wanted` of them give
    answers. llama.cpp's graphs keep only the output rows before the last layer's FFN
    (ggml_get_rows on out_ids, src/models/*.cpp), so its matmuls take kernels by their number:
    none, or a multiple of ROW_STEP from MIN_ROWS (at most `rows`, a piece_sizes size)."""
    if wanted == 0:
        return 0
    return min(rows, max(MIN_ROWS, -(-wanted // ROW_STEP) * ROW_STEP))


def suffix_waves(suffix_lengths: list[list[int]], free_seqs: Sequence[int],
                 wave_tokens: int) -> list[list[tuple[int, int, int]]]:
    """Every suffix continues its prefix in a sequence of its own: (seq, job, suffix) for each,
    in waves bounded by the free sequences and by `wave_tokens` suffix tokens (a wave's first
    suffix always fits), so the KV cache never overflows. Job by job, suffix by suffix."""
    pending = [(j, s) for j, lengths in enumerate(suffix_lengths) for s in range(len(lengths))]
    waves: list[list[tuple[int, int, int]]] = []
    at = 0
    while at < len(pending):
        wave: list[tuple[int, int, int]] = []
        tokens = 0
        while at < len(pending) and len(wave) < len(free_seqs) and (not wave or tokens < wave_tokens):
            j, s = pending[at]
            wave.append((free_seqs[len(wave)], j, s))
            tokens += suffix_lengths[j][s]
            at += 1
        waves.append(wave)
    return waves


@dataclass
class _Node:
    token: int
    seqs: list[int] = field(default_factory=list)
    keys: list[int] = field(default_factory=list)
    children: dict[int, _Node] = field(default_factory=dict)


# token, position (in shared_rows: the offset after the prefix), seqs it goes into, keys of the logits it gives
Row = tuple[int, int, tuple[int, ...], tuple[int, ...]]


def token_rows(seqs: tuple[int, ...], start: int, tokens: Sequence[int]) -> list[Row]:
    """Rows reading `tokens` from position `start` into every sequence of `seqs`, no logits."""
    return [(tok, start + i, seqs, ()) for i, tok in enumerate(tokens)]


def shared_rows(suffixes: Sequence[tuple[int, Sequence[int], int]]) -> list[Row]:
    """The rows that read every (seq, tokens, key) suffix of one prefix, each distinct run of
    leading tokens once: (token, offset after the prefix, the seqs that share it, the keys of the
    suffixes that end on it). The options of a choice repeat the whole question before each
    option; this reads the question once, in cells every option's sequence sees. Rows come
    depth first, so each sequence meets its tokens in position order (worker/snapshots.py says
    why that matters); identical suffixes end on one row and share its logits."""
    root = _Node(-1)
    for seq, tokens, key in suffixes:
        node = root
        for tok in tokens:
            node = node.children.setdefault(tok, _Node(tok))
            node.seqs.append(seq)
        node.keys.append(key)
    rows: list[Row] = []
    stack = [(child, 0) for child in reversed(root.children.values())]
    while stack:
        node, depth = stack.pop()
        rows.append((node.token, depth, tuple(node.seqs), tuple(node.keys)))
        stack.extend((child, depth + 1) for child in reversed(node.children.values()))
    return rows
