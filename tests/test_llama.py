"""shared/llama.py: the llama.cpp library as the Makefile builds it."""
import pytest

from shared.llama import built_with_amx, explained, llama


@pytest.mark.model  # the tier guard counts any llama.cpp start as the model tier
def test_the_library_is_built_without_intel_amx():
    # The Makefile passes -mno-amx-*: AMX faults (SIGILL) in some VMs that list it, and its kernels
    # are not covered by deterministic mode's shape rules (docs/architecture.md). On a CPU with
    # AMX, a build without those flags would say AMX_INT8 = 1 here.
    info = llama().llama_print_system_info().decode()
    assert "CPU :" in info and not built_with_amx(), info


def test_the_training_context_warning_is_explained_and_other_lines_pass_unchanged():
    warning = "llama_context: n_ctx_seq (9216) > n_ctx_train (4096) -- possible training context overflow\n"
    said = explained(warning)
    assert said.startswith("jevfleet: ") and "9216 cells" in said and "trained 4096" in said, said
    assert "overflow" not in said and said.endswith("\n")
    other = "llama_model_loader: something else entirely\n"
    assert explained(other) == other
