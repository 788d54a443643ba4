"""The one place that imports llama_cpp: the library, then quiet logs; and how a worker divides
a context's sequences, which bounds the state_cache setting (shared/config.py).

Gateway (vocab-only tokenizer) and worker (full model) both load through here, so they tokenize
with the same code and get the same ids. Both modes load the model alike, with llama.cpp's fast
CPU paths (weight repacking, the tiled K-quant matmul): deterministic mode gets its invariance
from the shapes of its micro-batches (worker/pieces.py), not from switching kernels off.
"""
from __future__ import annotations

import ctypes
import hashlib
import platform
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType

# How a worker's llama.cpp context divides its sequences; the state_cache setting's bound follows.
FA_TILE = 64  # ggml's GGML_FA_TILE_Q (query rows from which the tiled kernel runs) and GGML_FA_TILE_KV
MAX_SEQ = 256  # LLAMA_MAX_SEQ: the sequences one context can hold
N_WORK = 64  # a worker engine's working sequences: request prefixes, their suffixes, one scratch sequence
MAX_STATE_CACHE = MAX_SEQ - N_WORK  # the rest hold state snapshots (worker/snapshots.py), one each

_llama: ModuleType | None = None
_log_callback = None  # kept alive: llama.cpp holds a raw pointer to it
_ggml: ctypes.CDLL | None = None
_WARN, _ERROR = 3, 4  # ggml_log_level
_captured: list[str] | None = None  # captured_log's lines while it runs
_CELLS_OVER_TRAINED = re.compile(r"n_ctx_seq \((\d+)\) > n_ctx_train \((\d+)\) -- possible training context overflow")


def explained(line: str) -> str:
    """llama.cpp's log line, or ours in its place where it misleads. Its "possible training
    context overflow" compares the context's cells with the trained length, and a worker's cells
    hold its snapshots, request and scratch sequences besides one prompt (shared/memory.py
    context_cells); a position never passes ctx, which serve, decide and eval lower to the trained
    length (shared/memory.py within_trained_context)."""
    if match := _CELLS_OVER_TRAINED.search(line):
        cells, trained = match.groups()
        return (f"jevfleet: llama.cpp's 'n_ctx_seq ({cells}) > n_ctx_train ({trained})' counts the {cells} cells "
                f"shared by every sequence (snapshots, requests, scratch), not a prompt's positions: those stay "
                f"within ctx, at most the file's trained {trained}\n")
    return line


@contextmanager
def captured_log() -> Iterator[list[str]]:
    """llama.cpp's warnings and errors of the block in a list instead of on stderr, so a caller
    can say in one line why a load failed (shared/gguf_file.py). Not for concurrent use: lines
    other threads cause meanwhile land in the list too."""
    global _captured
    llama()
    _captured = lines = []
    try:
        yield lines
    finally:
        _captured = None


def llama() -> ModuleType:
    global _llama, _log_callback
    if _llama is None:
        import llama_cpp

        llama_cpp.llama_backend_init()

        @llama_cpp.llama_log_callback
        def _log(level: int, text: bytes, _user: ctypes.c_void_p) -> None:
            if level in (_WARN, _ERROR) and text:
                line = explained(text.decode("utf-8", "replace"))
                if _captured is not None:
                    _captured.append(line)
                else:
                    sys.stderr.write(line)

        _log_callback = _log
        llama_cpp.llama_log_set(_log_callback, ctypes.c_void_p(0))
        _llama = llama_cpp
        if built_with_amx():
            sys.stderr.write("jevfleet: this llama-cpp-python was built with Intel AMX; install it through the "
                             "Makefile, which builds it without (shared/llama_build.no_amx_flags says why)\n")
    return _llama


def built_with_amx() -> bool:
    return b"AMX_INT8 = 1" in llama().llama_print_system_info()


def isa_level(system_info: str) -> str:
    """The x86-64 level llama.cpp's CPU backend was compiled for, from its system info (which
    lists each instruction-set extension it was built with as "NAME = 1"): what decides its
    kernels, so two builds of one level compute the same bits on any CPU that runs them."""
    built = set(re.findall(r"(\w+) = 1", system_info))
    if platform.machine() != "x86_64":
        return platform.machine()
    if "AVX512" in built:
        return "x86-64-v4 (AVX-512" + "".join(f", {x}" for x in sorted(built) if x.startswith("AVX512_")) + ")"
    if {"AVX2", "FMA", "F16C", "BMI2"} <= built:
        return "x86-64-v3"
    return "x86-64-v2" if "SSE3" in built or "SSSE3" in built else "x86-64"


def build_description() -> str:
    """Which llama.cpp computes here, for a worker's serving facts and its refusal line: the
    llama-cpp-python version, the level its CPU backend was compiled for, and a digest of that
    library, which tells apart two builds of one level by other compilers."""
    lib = llama()
    from llama_cpp import llama_cpp as raw

    cpu = Path(raw._base_path) / "libggml-cpu.so"
    digest = hashlib.sha256(cpu.read_bytes()).hexdigest()[:12] if cpu.is_file() else "not found"
    return f"llama-cpp-python {lib.__version__} {isa_level(lib.llama_print_system_info().decode())}, " \
           f"libggml-cpu {digest}"


def load_model(path: Path, *, vocab_only: bool = False):
    lib = llama()
    params = lib.llama_model_default_params()
    params.vocab_only = vocab_only
    model = lib.llama_model_load_from_file(str(path).encode(), params)
    if not model:
        raise RuntimeError(f"llama.cpp could not load {path}")
    return model


def tokenize(vocab, text: str, *, add_bos: bool = False, special: bool = False) -> list[int]:
    """Token ids of `text`. Special-token syntax is parsed only when `special` is set, which
    only a profile's own template text gets (shared/profiles.encode_prefix): a state containing
    "<start_of_turn>" is read as plain text."""
    lib = llama()
    data = text.encode("utf-8")
    cap = len(data) + 8
    buf = (lib.llama_token * cap)()
    n = lib.llama_tokenize(vocab, data, len(data), buf, cap, add_bos, special)
    if n < 0:
        cap = -n
        buf = (lib.llama_token * cap)()
        n = lib.llama_tokenize(vocab, data, len(data), buf, cap, add_bos, special)
    return list(buf[:n])


def vocab_contains(vocab, fragment: bytes) -> bool:
    """Whether the text of any token holds `fragment`. When none holds the two characters either
    side of a cut in a text, no token can span that cut, so the two sides tokenize alone
    (shared/profiles.prefix_encoder). Reads every token once (~0.8 s for Gemma's 262,144, at start)."""
    lib = llama()
    buf = ctypes.create_string_buffer(256)
    return any(fragment in token_text(vocab, token, buf) for token in range(lib.llama_vocab_n_tokens(vocab)))


def token_text(vocab, token: int, buf: ctypes.Array | None = None) -> bytes:
    """The bytes of one token, special tokens with their text (<|im_start|>). `buf`: a buffer to
    reuse across calls (one per thread)."""
    lib = llama()
    buf = buf if buf is not None else ctypes.create_string_buffer(256)
    n = lib.llama_token_to_piece(vocab, token, buf, len(buf), 0, True)
    if n < 0:  # a piece longer than the buffer
        buf = ctypes.create_string_buffer(-n)
        n = lib.llama_token_to_piece(vocab, token, buf, len(buf), 0, True)
    return buf.raw[:n]


class GGUFInitParams(ctypes.Structure):
    _fields_ = [("no_alloc", ctypes.c_bool), ("ctx", ctypes.c_void_p)]


def save_sequence(ctx, seq: int) -> ctypes.Array:
    """A sequence's cells out of a context as llama.cpp's blob (positions, then K and V rows), in
    cell order: how the engine saves snapshots and the tiled reader hands its reads over."""
    lib = llama()
    blob = (ctypes.c_uint8 * lib.llama_state_seq_get_size(ctx, seq))()
    if lib.llama_state_seq_get_data(ctx, blob, len(blob), seq) != len(blob):
        raise RuntimeError(f"could not save sequence {seq}")
    return blob


def restore_sequence(ctx, seq: int, blob: ctypes.Array) -> None:
    """A blob of save_sequence into `seq` (emptied first), first-fit into contiguous cells."""
    if llama().llama_state_seq_set_data(ctx, blob, len(blob), seq) == 0:
        raise RuntimeError(f"could not restore sequence {seq}")


def ggml() -> ctypes.CDLL:
    """ggml's base library from llama-cpp-python's own build (llama-cpp-python wraps none of it):
    the tensor accessors an eval callback needs (worker/hidden.py) and the GGUF header reader
    (shared/gguf_header.py).
    Found by llama-cpp-python's own loader, where it found libllama (LLAMA_CPP_LIB_PATH
    included), so both are the same build on every platform it supports."""
    global _ggml
    if _ggml is None:
        from llama_cpp import llama_cpp as raw
        from llama_cpp._ctypes_extensions import load_shared_library

        lib = load_shared_library("ggml-base", raw._base_path)
        p, i64, size, text = ctypes.c_void_p, ctypes.c_int64, ctypes.c_size_t, ctypes.c_char_p
        for name, args, result in (
                ("ggml_get_name", [p], text), ("ggml_nelements", [p], i64),
                ("ggml_get_data_f32", [p], ctypes.POINTER(ctypes.c_float)),
                ("gguf_init_from_file", [text, GGUFInitParams], p), ("gguf_free", [p], None),
                ("gguf_find_key", [p, text], i64), ("gguf_get_val_str", [p, i64], text),
                ("gguf_get_kv_type", [p, i64], ctypes.c_int), ("gguf_get_val_bool", [p, i64], ctypes.c_bool),
                ("gguf_get_val_f32", [p, i64], ctypes.c_float),
                ("gguf_find_tensor", [p, text], i64), ("gguf_get_data_offset", [p], size),
                ("gguf_get_tensor_offset", [p, i64], size), ("gguf_get_tensor_size", [p, i64], size),
                ("gguf_get_tensor_type", [p, i64], ctypes.c_int), ("gguf_get_val_u32", [p, i64], ctypes.c_uint32),
                ("gguf_get_arr_n", [p, i64], size), ("gguf_get_arr_type", [p, i64], ctypes.c_int),
                ("gguf_get_arr_data", [p, i64], p)):
            getattr(lib, name).argtypes, getattr(lib, name).restype = args, result
        _ggml = lib
    return _ggml
