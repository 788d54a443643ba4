"""llama-cpp-python built from its source distribution with one line of llama.cpp changed, so that an
F32 KV cache reaches flash attention as F32.

llama.cpp's graph (src/llama-graph.cpp, build_attn_mha) casts K and V to F16 before flash
attention whenever they are F32, because some backends' kernels take only F16. ggml's CPU kernel
reads F32 K and V as they are, and then computes a deterministic-mode row exactly: its dot
products of Q with K in F32, its sums of values in F32. With the cast, `kv_cache_type = "f32"`
would compute as F16 does (Q rounded to F16, an F16 sum of values: the served margins 0.1 nats from
llama.cpp's exact reading, `make bench-exact`), only slower. The workers' start-up canary refuses
an F32 cache on a build without this change (worker/canary.py, check_exact).

    python -m deploy.llama_build    # into the environment of the Python that runs it

The wheel is kept in build/llama-wheel/ (built once per version, ~10 min on 2 cores). The Makefile
runs this when it sets up .venv, before the project's own dependencies (which then find
llama-cpp-python installed at the pinned version), and `make image` takes the same wheel
(deploy/image.py). Standard library only: it runs before anything else is installed. CMAKE_ARGS,
CFLAGS and CXXFLAGS (the Makefile's, without Intel AMX) reach the build through the environment.
"""
from __future__ import annotations

import re
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WHEEL_DIR = ROOT / "build" / "llama-wheel"
GRAPH = "vendor/llama.cpp/src/llama-graph.cpp"
CAST = """        // this can happen when KV cache is not used (e.g. an embedding model with non-causal attn)
        if (k->type == GGML_TYPE_F32) {
            k = ggml_cast(ctx0, k, GGML_TYPE_F16);
        }

        if (v->type == GGML_TYPE_F32) {
            v = ggml_cast(ctx0, v, GGML_TYPE_F16);
        }
"""
NO_CAST = "        // jevfleet (deploy/llama_build.py): F32 K and V go to flash attention as they are\n"


def pinned_version() -> str:
    """The llama-cpp-python version pyproject.toml pins."""
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    match = re.search(r'"llama-cpp-python==([^"\]]+)"', text)
    if not match:
        raise SystemExit("pyproject.toml pins no llama-cpp-python version")
    return match.group(1)


def patch(source: Path) -> None:
    """Drop the cast from an unpacked sdist; fails when the graph code is not the one this was written for."""
    graph = source / GRAPH
    text = graph.read_text(encoding="utf-8")
    if text.count(CAST) != 1:
        raise SystemExit(f"{graph}: the F32-to-F16 cast before flash attention is not where deploy/llama_build.py "
                         "expects it; check this llama.cpp version's build_attn_mha")
    graph.write_text(text.replace(CAST, NO_CAST), encoding="utf-8")


def build_wheel(dest: Path = WHEEL_DIR, python: str = sys.executable) -> Path:
    """The patched wheel of the pinned version in `dest`, built first when it is not there."""
    version = pinned_version()
    found = sorted(dest.glob(f"llama_cpp_python-{version}-*.whl"))
    if found:
        return found[0]
    dest.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        subprocess.run([python, "-m", "pip", "download", "--no-binary", ":all:", "--no-deps",
                        "--progress-bar", "off", "-d", str(work), f"llama-cpp-python=={version}"], check=True)
        (sdist,) = work.glob("llama_cpp_python-*.tar.gz")
        with tarfile.open(sdist) as tar:
            tar.extractall(work, filter="data")
        source = next(work.glob("llama_cpp_python-*/"))
        patch(source)
        print(f"building llama-cpp-python {version} with F32 K/V kept for flash attention (once, ~10 min)",
              flush=True)
        subprocess.run([python, "-m", "pip", "wheel", "--progress-bar", "off", "--no-cache-dir", "--no-deps",
                        "--wheel-dir", str(dest), str(source)], check=True)
    return next(dest.glob(f"llama_cpp_python-{version}-*.whl"))


def main() -> int:
    wheel = build_wheel()
    subprocess.run([sys.executable, "-m", "pip", "install", "--progress-bar", "off", "--force-reinstall", "--no-deps",
                    str(wheel)], check=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
