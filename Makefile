# The two commands: `make serve` and `make test`. Both set up .venv on first use.
PY_BOOT ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# Which llama.cpp build the venv gets (shared/llama_build.py): x86-64-v3, the portable default that
# computes the same bits on every AVX2 machine (CI's, every developer's, every node's), or native
# (faster where the CPU has AVX-512; its answers differ in the last bits from the portable build's,
# and a fleet admits only workers whose arithmetic agrees). Built once into the cache dir by recipe.
LLAMA_BUILD ?= x86-64-v3
export LLAMA_BUILD
LLAMA_INSTALL = $(PY_BOOT) -m shared.llama_build install --python $(PY) --level $(LLAMA_BUILD)

SERVE_FLAGS := $(if $(PORT),--port $(PORT)) $(if $(WORKERS),--workers $(WORKERS)) $(if $(PROFILE),--profile $(PROFILE))

# `make loadtest`: a short sweep of our fleet (default, --mode fast, one worker per core; started and
# stopped by the sweep) and the baselines, measured in one run, into docs/benchmarks/. llama-server is built
# once into the cache dir on first use (7 min on 2 quiet cores); LOADTEST_TARGET=both skips it.
# LOADTEST_DURATION takes per-workload times too: 20s,W4=60s.
# See docs/benchmarks.md.
LOADTEST_TARGET ?= all
LOADTEST_USERS ?= 1,2,4,8
LOADTEST_DURATION ?= 20s
LOADTEST_WORKLOAD ?= W1
LOADTEST_ROUNDS ?= 1
LOADTEST_OUT ?= docs/benchmarks

.PHONY: serve test setup clean loadtest

# $(STAMP): the package with what `make serve` needs. Each extra of pyproject.toml (test, loadtest,
# bench, quality) has a stamp of its own, installed by the targets that use it.
$(STAMP): pyproject.toml shared/llama_build.py
	test -x $(PY) || $(PY_BOOT) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(LLAMA_INSTALL)
	$(PY) -m pip install --progress-bar off -e .
	touch $(STAMP)

$(VENV)/.installed-%: $(STAMP)
	$(PY) -m pip install --progress-bar off -e '.[$*]'
	touch $@

setup: $(STAMP)

# The llama.cpp build is checked at each run (a file read): LLAMA_BUILD=native after a portable
# install, or back, swaps the library without a new venv.
.PHONY: llama-build
llama-build: $(STAMP)
	@$(LLAMA_INSTALL)

# The default model is Qwen2.5-Coder 1.5B Instruct (conf/models/qwen2.5-coder-1.5b.toml); PROFILE=gemma-3-270m
# serves the small one.
serve: $(STAMP) llama-build
	exec $(VENV)/bin/jevfleet serve $(SERVE_FLAGS)

# Three tiers, each timed: fast (no model), model (the GGUF in-process), fleet (supervisord); see
# tests/tiers.py. PYTEST_ARGS go to every tier; a tier that fails or selects nothing fails the run.
test: $(VENV)/.installed-test llama-build test-variant test-tools
	$(PY) -m tests.tiers $(PYTEST_ARGS)

# The second llama.cpp build that tests/test_arithmetic.py starts a worker on: x86-64-v2 (no AVX), whose
# kernels compute other bits on any x86-64 CPU. Its libraries only, built once into the cache dir
# (~2.5 min on two cores) before the timed tiers.
.PHONY: test-variant
test-variant: $(STAMP)
	$(PY_BOOT) -m shared.llama_build libs --level x86-64-v2

# What the multi-host and Kubernetes tests need besides Python packages, from Debian, installed when
# missing and we are root (as in CI); otherwise those tests skip. tests/test_multihost.py: HAProxy and
# iproute2. tests/test_kubernetes.py: podman with runc (crun fails on this kind of machine), its
# pause binary (catatonit), netavark and aardvark-dns for networks with DNS, and mmdebstrap for the
# image's base (deploy/image.py); podman's settings are deploy/podman/containers.conf, not /etc.
TEST_TOOLS := haproxy:haproxy ip:iproute2 podman:podman runc:runc mmdebstrap:mmdebstrap \
	catatonit:catatonit /usr/lib/podman/netavark:netavark \
	/usr/lib/podman/aardvark-dns:aardvark-dns iptables:iptables
.PHONY: test-tools
test-tools:
	@missing=""; for t in $(TEST_TOOLS); do \
	  command -v "$${t%%:*}" >/dev/null || missing="$$missing $${t#*:}"; done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
	    --no-install-recommends $$missing; \
	  else echo "make test: not root, cannot install$$missing; the tests that need them will skip"; fi; \
	fi

# The OCI image (deploy/Containerfile) with podman: the base, the wheelhouse, then podman build, each
# step skipped when its inputs are unchanged (deploy/image.py). IMAGE_ARGS="--base python:3.11-slim".
.PHONY: image
image: $(STAMP) llama-build test-tools
	$(PY) -m deploy.image $(IMAGE_ARGS)

loadtest: $(VENV)/.installed-loadtest
	$(PY) -m loadtest.sweep --target $(LOADTEST_TARGET) --users $(LOADTEST_USERS) \
		--duration $(LOADTEST_DURATION) --workload $(LOADTEST_WORKLOAD) \
		--rounds $(LOADTEST_ROUNDS) --out $(LOADTEST_OUT)

clean:
	rm -rf $(VENV) build *.egg-info

# The benchmarks behind the figures the README and docs/benchmarks.md quote, one entry point (bench/__main__.py):
# `make bench` lists them; `make bench NAME=floor BENCH_ARGS="--requests W1-fresh=60"` runs one and keeps its
# tables in docs/benchmarks/NAME.md with the machine and load average. Only on a quiet machine, one at a time.
.PHONY: bench
bench: $(VENV)/.installed-bench $(VENV)/.installed-loadtest
	$(PY) -m bench $(NAME) $(BENCH_ARGS)

# Compare prompt formats of a profile on the fit half of eval/yesno.jsonl (docs/quality.md).
.PHONY: prompt-variants
prompt-variants: $(VENV)/.installed-bench
	$(PY) -m quality.prompt_variants $(VARIANT_FLAGS)

# How far choice / merged-option / score-threshold answers are from the relations probabilities
# must satisfy, on the test half (docs/quality.md). BENCH_ARGS="--profile gemma-3-270m --head off".
.PHONY: coherence
coherence: $(VENV)/.installed-bench
	$(PY) -m quality.coherence $(BENCH_ARGS)

# Faults under load, every answer checked (issues 30, 40; docs/fleet.md): a reference pass (one worker, one
# client), then the same requests from 8 clients through HAProxy to 2 gateways and 3 workers on network namespaces,
# queues short enough for 429s, while workers are killed, drained and frozen, a gateway is killed and frozen, a
# link is cut (alone, and with a worker killed during it) and a client disconnects; then gateway faults through
# HAProxy without retries, whose failures are counted apart. Fails on any answer different from the reference,
# an undocumented status (retries on), a lost request, or a fleet not whole at the end. Root, HAProxy and iproute2
# needed (make test-tools). CHAOS_DURATION (s, default 600), CHAOS_SEED (1), CHAOS_ARGS (--requests N --clients N
# --queue-requests N --off-rounds N --max-requests N); report.json and every log in CHAOS_OUT.
CHAOS_DURATION ?= 600
CHAOS_SEED ?= 1
CHAOS_OUT ?= /tmp/jevfleet-chaos
.PHONY: chaos
chaos: $(VENV)/.installed-test test-tools
	$(PY) -m loadtest.chaos --duration $(CHAOS_DURATION) --seed $(CHAOS_SEED) --out $(CHAOS_OUT) $(CHAOS_ARGS)

# About 10,000 generated and mutated requests (bodies, headers, byte-level damage, compression bombs,
# lying Content-Length, other text encodings, huge numbers, deep nesting) against a real fleet:
# 0 responses >= 500, 0 hangs, 0 worker restarts, and the tally printed (`make test` runs a quarter).
.PHONY: fuzz
fuzz: $(VENV)/.installed-test
	JEV_FUZZ_FLEET=1 JEV_FUZZ_SCALE=$(or $(FUZZ_SCALE),4) $(PY) -m pytest tests/test_fuzz.py -q -s -p no:cacheprovider

# The model zoo (issue 38; bench/zoo.py; served and measured by `make bench NAME=zoo`): seeded random-weight GGUFs with real models' shapes, tokenizers
# and chat templates, quantized Q4_K_M by llama.cpp's quantizer, into cache_dir/zoo/ (kept by recipe).
# Default: Llama 3.2 1B, Qwen 2.5 1.5B, Gemma 3 1B; ZOO="llama-3.2-3b phi-3.5-mini gemma-2-2b minicpm-1b"
# for the others (each 1.5-5 min on two cores, F16 file of 2-8 GB on disk while it is quantized).
.PHONY: zoo
zoo: $(STAMP)
	$(PY) -m bench.zoo $(ZOO)