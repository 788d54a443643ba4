"""The model zoo: seeded random-weight GGUFs with the shapes, tokenizers and chat templates of the
files people serve (Llama 3.2, Qwen 2.5, Phi-3.5-mini, Gemma 2 and 3, MiniCPM), quantized Q4_K_M by
llama.cpp's own quantizer. Random weights make every answer meaningless and everything else real:
tensor shapes and types, kernels, memory, speed, tokenization and templates (issue 38).

`make zoo` (python -m bench.zoo [NAME ...]) builds the named recipes, or the default set, into
cache_dir/zoo/NAME-DIGEST.gguf, DIGEST naming the recipe, the builder's format and the
llama-cpp-python version (a recipe is rebuilt only when one of them changes). Each build writes an
F16/F32 file tensor by tensor (one tensor in memory at a time), quantizes it, deletes it.

Tokenizers and templates come from the llama-cpp-python source distribution of the pinned version
(vendor/llama.cpp/models/ggml-vocab-*.gguf and models/templates/*.jinja), fetched once with
`pip download` into the cache dir (shared/llama_build.sdist, which every llama.cpp build here is made from); Gemma's
tokenizer is not among llama.cpp's vocabulary files, so Gemma recipes take it, with its chat
template, from the default model's GGUF (Gemma 3 270M, a dependency). One module: the recipe
table, the tensor list of each architecture and the writer are read together when a recipe changes.
"""
from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import math
import sys
import tarfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import numpy as np

from shared.llama_build import sdist
from loadtest.validate import RANDOM_WEIGHTS

FORMAT = 1  # bump when the writer changes what a recipe produces
STD = 0.02  # weights ~ N(0, STD): with unit norms the activations stay finite through every layer
BIAS_STD = 0.02
DEFAULT_SET = ("llama-3.2-1b", "qwen-2.5-1.5b", "gemma-3-1b")
GEMMA_VOCAB = "gemma-3-270m"  # the default model's file: Gemma 3's tokenizer and chat template


@dataclass(frozen=True)
class Recipe:
    """Hyperparameters of one file, as the model's config.json gives them (llama.cpp's key names)."""
    name: str
    arch: str
    layers: int
    embd: int
    ff: int
    heads: int
    kv_heads: int
    head_dim: int
    context: int  # {arch}.context_length: the trained context
    vocab: str  # "llama-bpe" -> models/ggml-vocab-llama-bpe.gguf; GEMMA_VOCAB -> the default model
    template: str  # models/templates/NAME; "" = the vocabulary file's own
    rope_base: float = 10000.0
    eps: float = 1e-5
    tied: bool = True  # no output.weight: the token embeddings are the output matrix
    qkv_bias: bool = False
    extra: tuple[tuple[str, float | int], ...] = ()  # further {arch}.KEY values
    seed: int = 0

    def digest(self, llama_version: str) -> str:
        """What a built file depends on: the recipe, the builder's FORMAT and llama.cpp's version
        (its vocabulary files, templates and quantizer)."""
        key = json.dumps([dataclasses.asdict(self), FORMAT, llama_version], sort_keys=True)
        return hashlib.sha256(key.encode()).hexdigest()[:12]


RECIPES = {r.name: r for r in (
    # Llama 3.2 1B / 3B Instruct: tied embeddings, Llama 3 RoPE scaling (rope_freqs), 128k context
    Recipe("llama-3.2-1b", "llama", 16, 2048, 8192, 32, 8, 64, 131072, "llama-bpe",
           "meta-llama-Llama-3.2-3B-Instruct.jinja", rope_base=500000.0),
    Recipe("llama-3.2-3b", "llama", 28, 3072, 8192, 24, 8, 128, 131072, "llama-bpe",
           "meta-llama-Llama-3.2-3B-Instruct.jinja", rope_base=500000.0),
    # Qwen 2.5 1.5B Instruct: Q/K/V biases, tied embeddings
    Recipe("qwen-2.5-1.5b", "qwen2", 28, 1536, 8960, 12, 2, 128, 32768, "qwen2",
           "Qwen-Qwen2.5-7B-Instruct.jinja", rope_base=1e6, eps=1e-6, qkv_bias=True),
    # Phi-3.5-mini-instruct: fused QKV and gate/up, its own output matrix, LongRoPE factors
    Recipe("phi-3.5-mini", "phi3", 32, 3072, 8192, 32, 32, 96, 131072, "phi-3",
           "microsoft-Phi-3.5-mini-instruct.jinja", tied=False,
           extra=(("rope.scaling.original_context_length", 4096), ("rope.scaling.attn_factor", 1.190238))),
    # Gemma 2 2B it: final-logit and attention softcapping, sliding window every other layer
    Recipe("gemma-2-2b", "gemma2", 26, 2304, 9216, 8, 4, 256, 8192, GEMMA_VOCAB, "google-gemma-2-2b-it.jinja",
           eps=1e-6, extra=(("attention.sliding_window", 4096), ("final_logit_softcapping", 30.0),
                            ("attn_logit_softcapping", 50.0))),
    # Gemma 3 1B it: 5 sliding (512) to 1 global layer, Q/K norms; the instruction-tuned file's chat
    # turns (llama.cpp ships no Gemma 3 template: Gemma 2's has the same <start_of_turn> format)
    Recipe("gemma-3-1b", "gemma3", 26, 1152, 6912, 4, 1, 256, 32768, GEMMA_VOCAB, "google-gemma-2-2b-it.jinja",
           rope_base=1e6, eps=1e-6,
           extra=(("attention.sliding_window", 512), ("rope.freq_base_swa", 10000.0))),
    # MiniCPM 1B sft: muP scales (its own vocabulary of 122,753 is not in llama.cpp's models/)
    Recipe("minicpm-1b", "minicpm", 52, 1536, 3840, 24, 8, 64, 4096, "llama-spm", "openbmb-MiniCPM5-1B.jinja",
           extra=(("embedding_scale", 12.0), ("residual_scale", 1.4 / math.sqrt(52)), ("logit_scale", 1536 / 256))),
    # tests/test_zoo.py: two architectures the shipped profiles do not have, in seconds
    # (256 wide: rows of whole Q4_K blocks, so they take the K-quant kernels the real files take)
    Recipe("qwen2-tiny", "qwen2", 2, 256, 512, 4, 2, 64, 32768, "qwen2", "Qwen-Qwen2.5-7B-Instruct.jinja",
           rope_base=1e6, eps=1e-6, qkv_bias=True),
    Recipe("phi3-tiny", "phi3", 2, 256, 512, 4, 4, 64, 4096, "phi-3", "microsoft-Phi-3.5-mini-instruct.jinja",
           tied=False),
)}


@dataclass(frozen=True)
class Tensor:
    name: str
    shape: tuple[int, ...]  # numpy order: (rows, columns), rows = outputs
    kind: str  # "weight" N(0, STD) F16, "bias" N(0, BIAS_STD) F32, "norm" ones F32, "rope" given F32
    values: tuple[float, ...] = field(default=(), compare=False)


def llama3_rope_factors(head_dim: int, base: float, factor: float = 32.0, low: float = 1.0, high: float = 4.0,
                        original: int = 8192) -> tuple[float, ...]:
    """Llama 3.1/3.2's RoPE frequency factors (rope_freqs.weight), as its config's rope_scaling gives them."""
    out = []
    for freq in 1.0 / base ** (np.arange(0, head_dim, 2) / head_dim):
        wavelen = 2 * math.pi / freq
        if wavelen < original / high:
            out.append(1.0)
        elif wavelen > original / low:
            out.append(factor)
        else:
            smooth = (original / wavelen - low) / (high - low)
            out.append(1 / ((1 - smooth) / factor + smooth))
    return tuple(out)


def tensors(r: Recipe, n_vocab: int) -> Iterator[Tensor]:
    """The tensors llama.cpp's loader asks for with this architecture (src/models/ARCH.cpp)."""
    q, kv = r.heads * r.head_dim, r.kv_heads * r.head_dim
    yield Tensor("token_embd.weight", (n_vocab, r.embd), "weight")
    yield Tensor("output_norm.weight", (r.embd,), "norm")
    if not r.tied:
        yield Tensor("output.weight", (n_vocab, r.embd), "weight")
    if r.arch == "llama":
        yield Tensor("rope_freqs.weight", (r.head_dim // 2,), "rope", llama3_rope_factors(r.head_dim, r.rope_base))
    if r.arch == "phi3" and r.context > 4096:  # LongRoPE: short factors 1, long a smooth ramp (not Phi's own values)
        yield Tensor("rope_factors_short.weight", (r.head_dim // 2,), "rope", (1.0,) * (r.head_dim // 2))
        yield Tensor("rope_factors_long.weight", (r.head_dim // 2,), "rope",
                     tuple(float(x) for x in np.linspace(1.0, 40.0, r.head_dim // 2)))
    for i in range(r.layers):
        b = f"blk.{i}."
        yield Tensor(b + "attn_norm.weight", (r.embd,), "norm")
        if r.arch == "phi3":
            yield Tensor(b + "attn_qkv.weight", (q + 2 * kv, r.embd), "weight")
        else:
            for part, rows in (("q", q), ("k", kv), ("v", kv)):
                yield Tensor(f"{b}attn_{part}.weight", (rows, r.embd), "weight")
                if r.qkv_bias:
                    yield Tensor(f"{b}attn_{part}.bias", (rows,), "bias")
        if r.arch == "gemma3":
            yield Tensor(b + "attn_q_norm.weight", (r.head_dim,), "norm")
            yield Tensor(b + "attn_k_norm.weight", (r.head_dim,), "norm")
        yield Tensor(b + "attn_output.weight", (r.embd, q), "weight")
        if r.arch in ("gemma2", "gemma3"):
            yield Tensor(b + "post_attention_norm.weight", (r.embd,), "norm")
        yield Tensor(b + "ffn_norm.weight", (r.embd,), "norm")
        if r.arch == "phi3":
            yield Tensor(b + "ffn_up.weight", (2 * r.ff, r.embd), "weight")
        else:
            yield Tensor(b + "ffn_gate.weight", (r.ff, r.embd), "weight")
            yield Tensor(b + "ffn_up.weight", (r.ff, r.embd), "weight")
        yield Tensor(b + "ffn_down.weight", (r.embd, r.ff), "weight")
        if r.arch in ("gemma2", "gemma3"):
            yield Tensor(b + "post_ffw_norm.weight", (r.embd,), "norm")


def parameters(r: Recipe, n_vocab: int) -> int:
    return sum(math.prod(t.shape) for t in tensors(r, n_vocab))


def _values(t: Tensor, rng: np.random.Generator) -> np.ndarray:
    if t.kind == "norm":
        return np.ones(t.shape, np.float32)
    if t.kind == "rope":
        return np.array(t.values, np.float32)
    std = STD if t.kind == "weight" else BIAS_STD
    values = rng.standard_normal(t.shape, dtype=np.float32) * np.float32(std)
    return values.astype(np.float16) if t.kind == "weight" else values


# --- sources: llama-cpp-python's sdist, the default model ------------------------------------------
def llama_version() -> str:
    import llama_cpp

    return llama_cpp.__version__


def source_file(cache: Path, relative: str) -> Path:
    """vendor/llama.cpp/models/RELATIVE from the sdist, extracted once into the cache."""
    out = cache / "src" / llama_version() / relative
    if not out.is_file():
        with tarfile.open(sdist(cache)) as tar:
            member = next((m for m in tar.getmembers() if m.name.endswith("/vendor/llama.cpp/models/" + relative)),
                          None)
            if member is None:
                raise SystemExit(f"zoo: llama-cpp-python {llama_version()}'s sdist has no models/{relative}")
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_bytes(tar.extractfile(member).read())
    return out


def vocab_file(cache: Path, r: Recipe) -> Path:
    if r.vocab == GEMMA_VOCAB:
        from shared.config import default_settings
        from shared.model_files import resolve_model
        from shared.profiles import load_profile

        return resolve_model(load_profile(GEMMA_VOCAB), default_settings().cache_path)
    return source_file(cache, f"ggml-vocab-{r.vocab}.gguf")


def copy_tokenizer(writer, vocab: Path, template: str) -> int:
    """The vocabulary file's tokenizer.* fields into `writer`, the chat template replaced by
    `template` when given; the vocabulary's size."""
    from gguf import GGUFReader, GGUFValueType

    reader = GGUFReader(vocab)
    n_vocab = 0
    for name, fld in reader.fields.items():
        if not name.startswith("tokenizer.") or (template and name == "tokenizer.chat_template"):
            continue
        kind = fld.types[0]
        if kind == GGUFValueType.ARRAY:
            writer.add_key_value(name, fld.contents(), kind, sub_type=fld.types[-1])
            if name == "tokenizer.ggml.tokens":
                n_vocab = len(fld.data)
        else:
            writer.add_key_value(name, fld.contents(), kind)
    if template:
        writer.add_chat_template(template)
    return n_vocab


# --- building ----------------------------------------------------------------------------------
def target(cache: Path, r: Recipe) -> Path:
    return cache / f"{r.name}-{r.digest(llama_version())}.gguf"


def write_f16(r: Recipe, path: Path, cache: Path, progress: bool = True) -> int:
    """The unquantized file, one tensor generated and written at a time; its parameter count."""
    from gguf import GGMLQuantizationType, GGUFWriter
    from tqdm import tqdm

    writer = GGUFWriter(path, r.arch)
    writer.add_name(f"{r.name} ({RANDOM_WEIGHTS})")
    writer.add_file_type(1)  # mostly F16
    template = source_file(cache, "templates/" + r.template).read_text() if r.template else ""
    n_vocab = copy_tokenizer(writer, vocab_file(cache, r), template)
    a = r.arch
    for key, value in (("context_length", r.context), ("embedding_length", r.embd), ("block_count", r.layers),
                       ("feed_forward_length", r.ff), ("attention.head_count", r.heads),
                       ("attention.head_count_kv", r.kv_heads), ("attention.key_length", r.head_dim),
                       ("attention.value_length", r.head_dim), ("rope.dimension_count", r.head_dim),
                       ("vocab_size", n_vocab)):
        writer.add_uint32(f"{a}.{key}", value)
    writer.add_float32(f"{a}.rope.freq_base", r.rope_base)
    writer.add_float32(f"{a}.attention.layer_norm_rms_epsilon", r.eps)
    for key, value in r.extra:
        (writer.add_uint32 if isinstance(value, int) else writer.add_float32)(f"{a}.{key}", value)
    plan = list(tensors(r, n_vocab))
    for t in plan:
        f16 = t.kind == "weight"
        writer.add_tensor_info(t.name, t.shape, np.dtype(np.float16 if f16 else np.float32),
                               math.prod(t.shape) * (2 if f16 else 4),
                               GGMLQuantizationType.F16 if f16 else GGMLQuantizationType.F32)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    rng = np.random.Generator(np.random.PCG64(r.seed))
    total = sum(math.prod(t.shape) for t in plan)
    with tqdm(total=total, unit="param", unit_scale=True, desc=f"{r.name}: F16", disable=not progress,
              file=sys.stderr) as bar:
        for t in plan:
            writer.write_tensor_data(_values(t, rng))
            bar.update(math.prod(t.shape))
    writer.close()
    return total


def quantize(src: Path, dst: Path, threads: int = 0) -> None:
    """Q4_K_M by llama.cpp's own quantizer (llama_model_quantize), as llama-quantize does it."""
    import llama_cpp

    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = llama_cpp.LLAMA_FTYPE_MOSTLY_Q4_K_M
    params.nthread = threads
    if llama_cpp.llama_model_quantize(str(src).encode(), str(dst).encode(), params) != 0:
        raise SystemExit(f"zoo: llama.cpp could not quantize {src}")


def build(name: str, cache: Path, *, progress: bool = True) -> Path:
    """The recipe's Q4_K_M file, built unless the cache has it."""
    r = RECIPES[name]
    out = target(cache, r)
    if out.is_file():
        return out
    cache.mkdir(parents=True, exist_ok=True)
    f16 = out.with_suffix(".f16.tmp")
    tmp = out.with_suffix(".tmp")
    started = time.monotonic()
    try:
        params = write_f16(r, f16, cache, progress)
        written = time.monotonic()
        if progress:
            print(f"zoo: {name}: {params / 1e9:.2f}B parameters written in {written - started:.0f} s; "
                  "quantizing Q4_K_M", file=sys.stderr, flush=True)
        quantize(f16, tmp)
        tmp.replace(out)
    finally:
        f16.unlink(missing_ok=True)
        tmp.unlink(missing_ok=True)
    if progress:
        print(f"zoo: {name}: {out} ({out.stat().st_size / 2**20:.0f} MiB) in {time.monotonic() - started:.0f} s",
              file=sys.stderr, flush=True)
    return out


def zoo_dir() -> Path:
    from shared.config import load_settings

    return load_settings().cache_path / "zoo"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.zoo", description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help=f"recipes to build (default: {' '.join(DEFAULT_SET)}); "
                                                 f"known: {' '.join(RECIPES)}")
    parser.add_argument("--cache", type=Path, help="where the files go (default: cache_dir/zoo)")
    args = parser.parse_args(argv)
    unknown = [n for n in args.names if n not in RECIPES]
    if unknown:
        parser.error(f"unknown recipe(s) {', '.join(unknown)}; known: {', '.join(RECIPES)}")
    cache = args.cache or zoo_dir()
    for name in args.names or DEFAULT_SET:
        print(build(name, cache), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
