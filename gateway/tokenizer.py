"""Tokenizing on the gateway, in a thread pool: llama.cpp's tokenizer releases the GIL (ctypes),
so several requests tokenize in parallel while the workers compute. It loads the same GGUF
vocab-only (no weights), through the same function the worker uses, so the ids match.

Question suffixes are tokenized alone (each continues the prefix on a token boundary), so the
ids of a suffix text never depend on the request: they are kept in an LRU, and a questionnaire
asked of many states costs its tokenizing once. Prefixes (preamble + state) are kept the same
way, keyed by their whole text, so a state asked about again (the case snapshots serve) is not
tokenized again either: the same text always gives the same ids. The preamble's own ids are
computed once (shared/profiles.prefix_encoder), so a new state costs only its own tokenizing."""
from __future__ import annotations

import asyncio
from array import array
from concurrent.futures import ThreadPoolExecutor
from functools import lru_cache, partial
from pathlib import Path

from shared.llama import llama, load_model, tokenize, vocab_contains
from shared.profiles import Profile, answer_ids, encode_suffix, preamble_tokens, prefix_encoder

SUFFIX_CACHE = 4096  # distinct question texts whose ids are kept (a few hundred KB)
PREFIX_CACHE = 64  # distinct prefixes whose ids are kept, as int32 arrays (under 3 MB at ctx 8192)


class Tokenizer:
    def __init__(self, model_path: Path, profile: Profile, *, threads: int = 2):
        self.model = load_model(model_path, vocab_only=True)
        self.vocab = llama().llama_model_get_vocab(self.model)
        self.profile = profile
        self.pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="tokenize")
        self.yes_ids = answer_ids(partial(tokenize, self.vocab), profile.yes)
        self.no_ids = answer_ids(partial(tokenize, self.vocab), profile.no)
        self.preamble_tokens = len(preamble_tokens(partial(tokenize, self.vocab), profile))
        self._suffix_ids = lru_cache(maxsize=SUFFIX_CACHE)(
            lambda text: tuple(encode_suffix(partial(tokenize, self.vocab), profile, text)))
        self.encode_prefix = prefix_encoder(partial(tokenize, self.vocab), profile,
                                            partial(vocab_contains, self.vocab))
        # The ids of recent prefixes, kept: an lru_cache, whose cache_info() counts the hits.
        self.prefix_ids = lru_cache(maxsize=PREFIX_CACHE)(lambda text: array("i", self.encode_prefix(text)))

    def encode(self, text: str, *, bos: bool = False) -> list[int]:
        return tokenize(self.vocab, text, add_bos=bos)

    def encode_request(self, prefix: str, suffixes: list[str]) -> tuple[list[int], list[list[int]]]:
        return self.prefix_ids(prefix).tolist(), [list(self._suffix_ids(s)) for s in suffixes]

    async def encode_async(self, prefix: str, suffixes: list[str]) -> tuple[list[int], list[list[int]]]:
        return await asyncio.get_running_loop().run_in_executor(self.pool, self.encode_request, prefix, suffixes)

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)
