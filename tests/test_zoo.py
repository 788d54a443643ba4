"""bench/zoo.py: the recipe table reproduces the published models' parameter counts and names a
file by everything it depends on (no model); and tiny files of architectures the shipped profiles
do not have, built with the real tokenizers and chat templates: qwen2 (Q/K/V biases) served by the
engine as a worker serves it (profile derived, readout within the canary's tolerance, answers
bit-identical alone and among batch mates); phi3 (fused QKV and gate/up, its own output matrix)
so far refused at derivation (an expected failure, issue 38)."""
from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from bench import zoo

# Hugging Face's parameter counts of the models whose shapes the recipes copy (tied embeddings
# counted once), with each recipe's vocabulary size; the recipes add only RoPE factor tensors.
PUBLISHED = {"llama-3.2-1b": (1_235_814_400, 128256), "llama-3.2-3b": (3_212_749_824, 128256),
             "qwen-2.5-1.5b": (1_543_714_304, 151936), "phi-3.5-mini": (3_821_079_552, 32064),
             "gemma-2-2b": (2_614_341_888, 256000), "gemma-3-1b": (999_885_952, 262144)}


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_a_recipe_has_the_published_models_parameters(name):
    published, n_vocab = PUBLISHED[name]
    rope = sum(math.prod(t.shape) for t in zoo.tensors(zoo.RECIPES[name], n_vocab) if t.kind == "rope")
    assert zoo.parameters(zoo.RECIPES[name], n_vocab) - rope == published


def test_a_files_name_changes_with_its_recipe_and_llama_cpps_version_only():
    recipe = zoo.RECIPES["llama-3.2-1b"]
    digest = recipe.digest("0.3.36")
    assert digest == dataclasses.replace(recipe).digest("0.3.36")
    assert recipe.digest("0.3.37") != digest
    assert dataclasses.replace(recipe, seed=1).digest("0.3.36") != digest
    assert dataclasses.replace(recipe, context=8192).digest("0.3.36") != digest


def test_llama3_rope_factors_leave_high_frequencies_and_stretch_low_ones():
    factors = zoo.llama3_rope_factors(64, 500000.0)
    assert len(factors) == 32 and factors[0] == 1.0 and factors[-1] == 32.0
    assert all(a <= b for a, b in zip(factors, factors[1:]))


def test_each_architecture_gets_the_tensors_llama_cpp_asks_for():
    names = {r: {t.name for t in zoo.tensors(zoo.RECIPES[r], 100)} for r in ("qwen2-tiny", "phi3-tiny")}
    assert {"blk.0.attn_q.bias", "blk.1.attn_v.bias"} <= names["qwen2-tiny"] and "output.weight" not in names["qwen2-tiny"]
    assert {"blk.0.attn_qkv.weight", "output.weight"} <= names["phi3-tiny"]
    assert not any("ffn_gate" in n or "attn_q." in n for n in names["phi3-tiny"])
    up = next(t for t in zoo.tensors(zoo.RECIPES["phi3-tiny"], 100) if t.name == "blk.0.ffn_up.weight")
    assert up.shape == (2 * zoo.RECIPES["phi3-tiny"].ff, zoo.RECIPES["phi3-tiny"].embd)  # gate and up, fused


# --- the tiny files, on the engine ------------------------------------------------------------


def tiny(name: str):
    return zoo.build(name, zoo.zoo_dir(), progress=False)  # built once (seconds), then cached by recipe


# phi3-tiny's engine tests wait for its profile: derivation refuses the file (below), and the few-shot
# profile's " Yes" is two tokens of Phi-3's vocabulary
@pytest.fixture(scope="module", params=["qwen2-tiny"])
def served(request):
    """A tiny zoo file on an engine as a worker builds it (build_engine runs the start-up canary),
    with the profile derived from the file."""
    from jevfleet.harness.engine import model_of, new_engine
    from shared.config import default_settings

    settings = default_settings(model=str(tiny(request.param)))
    engine = new_engine(settings, ctx=2048, state_cache=4, state_cache_mb=64)
    yield request.param, model_of(settings)[0], engine
    engine.close()


@pytest.mark.model
@pytest.mark.parametrize("name", ["qwen2-tiny", pytest.param("phi3-tiny", marks=pytest.mark.xfail(
    strict=True, reason="issue 38, open: Phi-3's SentencePiece vocabulary with Phi-3.5's template: no "
                        "prefix/suffix cut of the rendered chat is a token boundary, so the file is refused"))])
def test_the_profile_is_derived_from_the_files_chat_template(name):
    from shared.derive import derive_profile

    profile = derive_profile(tiny(name))
    assert profile.derived and profile.suffix.endswith({"qwen2-tiny": "<|im_start|>assistant\n",
                                                        "phi3-tiny": "<|assistant|>\n"}[name])
    assert profile.yes and profile.no


@pytest.mark.model
def test_the_readout_agrees_with_llama_cpps_row(served):
    from worker.canary import TOLERANCE, run_canary

    _, profile, engine = served
    report = run_canary(engine, profile)
    assert report.output_type in ("Q4_K", "Q5_K", "Q6_K", "Q8_0") and report.max_logit_gap <= TOLERANCE


@pytest.mark.model
def test_an_answer_is_bit_identical_alone_and_among_batch_mates(served):
    from worker.warmup import make_job

    _, profile, engine = served
    alone = make_job(engine, profile, "My card was charged twice.", ["Is this about billing?"])
    engine.run([alone])
    engine.cache.clear()
    again = make_job(engine, profile, "My card was charged twice.", ["Is this about billing?"])
    batch = [make_job(engine, profile, "The app crashes at start.", ["Is the app broken?", "Is it slow?"]), again,
             make_job(engine, profile, "Where is my parcel? It is a week late.", ["Is the parcel late?"])]
    engine.run(batch)
    assert np.isfinite(alone.margins).all() and again.margins == alone.margins
