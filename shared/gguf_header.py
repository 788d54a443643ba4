"""A GGUF file's header, read by ggml's GGUF reader (the one llama.cpp loads with), tensor data
not loaded: what is known of a file before, or besides, llama.cpp loading it. The one reader for
shared/gguf_file.py (architecture, chat template, the embedding and output tables' sizes),
shared/memory.py (layer count, K and V widths, vocabulary and trained context) and
worker/hidden.py (the output matrix and what the graph does after it).

Why ggml's and not the gguf package's Python reader: that one parses every header entry in
Python, 11 s over Gemma's 262,144-token vocabulary; ggml's takes milliseconds.
"""
from __future__ import annotations

import ctypes
from pathlib import Path
from typing import NamedTuple

from shared.llama import GGUFInitParams, ggml

GGUF_TYPE_INT32, GGUF_TYPE_FLOAT32, GGUF_TYPE_BOOL, GGUF_TYPE_STRING, GGUF_TYPE_ARRAY = 5, 6, 7, 8, 9  # enum gguf_type


class Tensor(NamedTuple):
    """Where a tensor's data lies in the file, to memory-map it, and its ggml_type."""
    offset: int  # bytes from the file's start
    size: int  # bytes
    type: int


class GgufHeader:
    """`with GgufHeader(path) as header:` the header's values by key, typed; `header` is None when
    ggml cannot parse the file, so that each caller refuses it in its own words. Freed after."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._lib = ggml()
        self._ctx: int | None = None

    def __enter__(self) -> GgufHeader | None:
        self._ctx = self._lib.gguf_init_from_file(str(self.path).encode(), GGUFInitParams(True, None)) or None
        return self if self._ctx else None

    def __exit__(self, *_exc: object) -> None:
        if self._ctx:
            self._lib.gguf_free(self._ctx)
            self._ctx = None

    def _key(self, key: str, kind: int | None = None) -> int:
        """The key's index; -1 when it is missing or, `kind` given, of another type (ggml's getters
        abort the process on a type they were not asked for)."""
        at = self._lib.gguf_find_key(self._ctx, key.encode())
        return at if at >= 0 and (kind is None or self._lib.gguf_get_kv_type(self._ctx, at) == kind) else -1

    def string(self, key: str) -> str:
        """A string value; "" when missing or not a string, which every caller reads as not stated."""
        at = self._key(key, GGUF_TYPE_STRING)
        return self._lib.gguf_get_val_str(self._ctx, at).decode("utf-8", "replace") if at >= 0 else ""

    def boolean(self, key: str, default: bool) -> bool:
        """A bool value; `default` (llama.cpp's own for the key) when missing or not a bool."""
        at = self._key(key, GGUF_TYPE_BOOL)
        return bool(self._lib.gguf_get_val_bool(self._ctx, at)) if at >= 0 else default

    def f32(self, key: str) -> float | None:
        """A float32 value; None when missing or of another type."""
        at = self._key(key, GGUF_TYPE_FLOAT32)
        return float(self._lib.gguf_get_val_f32(self._ctx, at)) if at >= 0 else None

    def u32(self, key: str, default: int | None = None) -> int:
        """A uint32 value; `default` when missing, ValueError without one (a hyperparameter the
        caller cannot do without). Not type-checked: llama.cpp's loader refuses a file whose
        hyperparameter has another type, and ggml's getter aborts on it."""
        at = self._key(key)
        if at < 0:
            if default is None:
                raise ValueError(f"the GGUF header has no {key}")
            return default
        return int(self._lib.gguf_get_val_u32(self._ctx, at))

    def per_layer(self, key: str, n_layer: int, default: int) -> list[int]:
        """A hyperparameter that is one number or one per layer (head_count_kv of OpenELM-like
        files, int32 or uint32), as one per layer; `default` for each when missing."""
        lib, ctx, at = self._lib, self._ctx, self._key(key)
        if at < 0:
            return [default] * n_layer
        if lib.gguf_get_kv_type(ctx, at) != GGUF_TYPE_ARRAY:
            return [int(lib.gguf_get_val_u32(ctx, at))] * n_layer
        kind = ctypes.c_int32 if lib.gguf_get_arr_type(ctx, at) == GGUF_TYPE_INT32 else ctypes.c_uint32
        values = ctypes.cast(lib.gguf_get_arr_data(ctx, at), ctypes.POINTER(kind))
        return [int(values[i]) for i in range(lib.gguf_get_arr_n(ctx, at))]

    def count(self, key: str) -> int:
        """How many elements an array value has (the vocabulary's tokens); 0 when missing."""
        at = self._key(key)
        return int(self._lib.gguf_get_arr_n(self._ctx, at)) if at >= 0 else 0

    def tensor(self, name: str) -> Tensor | None:
        """Where the tensor `name` lies in the file, its size and type; None when the file has none."""
        lib, ctx = self._lib, self._ctx
        at = lib.gguf_find_tensor(ctx, name.encode())
        if at < 0:
            return None
        return Tensor(lib.gguf_get_data_offset(ctx) + lib.gguf_get_tensor_offset(ctx, at),
                      lib.gguf_get_tensor_size(ctx, at), lib.gguf_get_tensor_type(ctx, at))
