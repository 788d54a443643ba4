"""shared/plan.py: one function from settings to what they serve, the same in every process
(header-only GGUF files from tests/test_memory.py; no model is loaded)."""
from __future__ import annotations

from shared.config import default_settings
from shared.plan import serving_plan
from shared.profiles import load_profile
from tests.test_memory import header


def test_a_plan_names_the_profile_the_file_its_shape_and_lowers_ctx_to_the_files_reach(tmp_path):
    model = header(tmp_path / "short.gguf", "llama", layers=2, embd=256, heads=4, kv_heads=4, ctx_train=2048)
    plan = serving_plan(default_settings(profile="gemma-3-270m", model=str(model), ctx=8192))
    assert plan.profile.name == "gemma-3-270m"
    assert plan.model == model
    assert (plan.shape.n_layer, plan.shape.n_ctx_train) == (2, 2048)
    assert plan.settings.ctx == 2048  # the gateway and every worker make this same plan: they refuse alike
    assert serving_plan(plan.settings) == plan  # a plan's settings plan the same again (what serve hands on)


def test_a_profile_given_replaces_the_one_the_settings_name_on_the_file_it_names(tmp_path):
    model = header(tmp_path / "m.gguf", "llama", layers=2, embd=256, heads=4, kv_heads=4)
    tried = load_profile("gemma-3-270m")
    plan = serving_plan(default_settings(profile="qwen2.5-coder-1.5b", model=str(model)), tried)
    assert (plan.profile, plan.model) == (tried, model)
