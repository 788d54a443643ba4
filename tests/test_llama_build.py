"""shared/llama_build.py: the portable build's recipe, its name in the cache, the static check
that finds AVX-512 and AMX instructions in a library, and that check on the llama.cpp libraries
this venv runs and the image carries (the same portable wheel: deploy/image.py)."""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from shared import llama_build
from shared.config import PROJECT_ROOT
from shared.llama import isa_level

WIDE = "#include <immintrin.h>\n__m512 f(__m512 a, __m512 b) { return _mm512_fmadd_ps(a, b, a); }\n"
AVX2 = "#include <immintrin.h>\n__m256 f(__m256 a, __m256 b) { return _mm256_fmadd_ps(a, b, a); }\n"


def test_the_pinned_version_is_the_one_built():
    pins = re.findall(r'"llama-cpp-python(?:\[\w+\])?==([\d.]+)"', (PROJECT_ROOT / "pyproject.toml").read_text())
    assert pins and set(pins) == {llama_build.VERSION}


def test_the_portable_level_turns_avx2_on_and_every_avx512_and_amx_option_off_without_native():
    args = llama_build.cmake_args("x86-64-v3")
    assert "-DGGML_NATIVE=OFF" in args
    for name in ("AVX", "AVX2", "FMA", "F16C", "BMI2"):
        assert f"-DGGML_{name}=ON" in args
    wide = [a for a in args if re.match(r"-DGGML_(AVX512|AMX)", a)]
    assert len(wide) == 7 and all(a.endswith("=OFF") for a in wide)
    assert "-DGGML_AVX=OFF" in llama_build.cmake_args("x86-64-v2")
    assert "-DGGML_NATIVE=ON" in llama_build.cmake_args("native")
    with pytest.raises(ValueError, match="unknown llama.cpp build level 'v5'"):
        llama_build.cmake_args("v5")


def test_each_level_is_kept_under_a_name_of_its_own_that_does_not_change_between_calls():
    names = {level: llama_build.build_name(level) for level in llama_build.LEVELS}
    assert len(set(names.values())) == len(names)
    assert names["x86-64-v3"] == llama_build.build_name("x86-64-v3")
    assert names["x86-64-v3"].startswith(f"{llama_build.VERSION}-x86-64-v3-")


def test_a_venv_records_its_build_and_its_level_is_read_back(tmp_path):
    assert llama_build.installed_level(tmp_path) == llama_build.DEFAULT_LEVEL  # none recorded
    (tmp_path / ".llama-build").write_text(llama_build.build_name("x86-64-v2") + "\n")
    assert llama_build.installed_level(tmp_path) == "x86-64-v2"


def test_the_level_is_read_from_llama_cpps_system_info():
    assert isa_level("CPU : SSE3 = 1 | SSSE3 = 1 | AVX = 1 | AVX2 = 1 | F16C = 1 | FMA = 1 | BMI2 = 1 | "
                     "LLAMAFILE = 1 |") == "x86-64-v3"
    assert isa_level("CPU : SSE3 = 1 | SSSE3 = 1 | LLAMAFILE = 1 |") == "x86-64-v2"
    assert isa_level("CPU : SSE3 = 1 | AVX = 1 | AVX2 = 1 | F16C = 1 | FMA = 1 | BMI2 = 1 | AVX512 = 1 | "
                     "AVX512_VBMI = 1 |") == "x86-64-v4 (AVX-512, AVX512_VBMI)"


def compiled(tmp_path: Path, name: str, source: str, flags: list[str]) -> Path:
    (tmp_path / f"{name}.c").write_text(source)
    out = tmp_path / f"lib{name}.so"
    subprocess.run(["cc", "-O2", "-shared", "-fPIC", *flags, "-o", str(out), str(tmp_path / f"{name}.c")],
                   check=True)
    return out


@pytest.mark.skipif(shutil.which("objdump") is None or shutil.which("cc") is None, reason="no objdump or cc")
def test_the_static_check_finds_an_avx512_instruction_and_passes_avx2_code(tmp_path):
    wide = llama_build.wide_instructions(compiled(tmp_path, "wide", WIDE, ["-mavx512f"]))
    assert wide and "zmm" in wide[0]
    assert llama_build.wide_instructions(compiled(tmp_path, "avx2", AVX2, ["-mavx2", "-mfma"])) == []


@pytest.mark.skipif(shutil.which("objdump") is None, reason="no objdump")
def test_the_llama_cpp_libraries_of_the_portable_build_hold_no_avx512_or_amx_instruction():
    """The venv's libraries, which are the portable wheel's (the Makefile installs it; the image's
    wheelhouse takes the same file and deploy/image.check_portable runs this check on it too)."""
    if llama_build.installed_level(sys.prefix) != llama_build.DEFAULT_LEVEL:
        pytest.skip(f"this venv runs LLAMA_BUILD={llama_build.installed_level(sys.prefix)}, not the portable build")
    import llama_cpp.llama_cpp as raw

    libraries = sorted(Path(raw._base_path).glob("lib*.so"))
    assert {lib.name for lib in libraries} >= {"libllama.so", "libggml-cpu.so", "libggml-base.so"}
    for library in libraries:
        assert llama_build.wide_instructions(library) == [], library.name
