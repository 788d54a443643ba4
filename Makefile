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

.PHONY: serve test setup clean loadtest bench-engine

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

.PHONY: bench-latency
bench-latency: $(VENV)/.installed-bench
	$(PY) -m bench.latency

# Gateway-side overhead (Server-Timing parse/validate/tokenize/respond), a gateway with a stub worker.
# BENCH_ARGS="--short 50 --large 5" for a quick run; --url http://... to measure a running fleet.
.PHONY: bench-gateway
bench-gateway: $(VENV)/.installed-bench
	$(PY) -m bench.gateway_overhead $(BENCH_ARGS)

# How many workers one gateway can feed: gateway processes with instant-answer workers (real ZeroMQ,
# no model) under rising closed-loop load; BENCH_ARGS="--gateways 1,2" also runs two side by side.
.PHONY: bench-ceiling
bench-ceiling: $(VENV)/.installed-bench
	$(PY) -m bench.gateway_ceiling $(BENCH_ARGS)

.PHONY: bench-decide
bench-decide: $(VENV)/.installed-bench
	$(PY) -m bench.decide

.PHONY: bench-engine
# Engine benchmark (batching, snapshots, warmup, memory, modes); BENCH_ARGS=--quick for a short run.
bench-engine: $(VENV)/.installed-bench
	$(PY) -m bench.engine $(BENCH_ARGS)

# Which micro-batch shapes keep a token row's logits bit-identical, per kernel (docs/architecture.md).
.PHONY: bench-invariance
bench-invariance: $(VENV)/.installed-bench
	$(PY) -m bench.invariance $(BENCH_ARGS)

# Where a short request's time goes in the worker (llama_decode calls, cache size), both modes.
.PHONY: bench-decode
bench-decode: $(VENV)/.installed-bench
	$(PY) -m bench.decode_cost $(BENCH_ARGS)

# Why a fresh prompt reads slower in deterministic mode than in llama-server: the same tokens through the
# engine, bare llama.cpp contexts in 60-, 64- and 512-row pieces, and llama-server (docs/benchmarks.md).
.PHONY: bench-fresh-read
bench-fresh-read: $(VENV)/.installed-bench
	$(PY) -m bench.fresh_read $(BENCH_ARGS)

# Whether a state read through flash attention's tiled kernel (a KV stream a sequence, 64-row pieces)
# is bit-identical beside other reads and across cuts, with three controls that must differ, and what
# it saves on four first-seen states; JEV_MODEL for a zoo file (bench/tiled_read.py).
.PHONY: bench-tiled-read
bench-tiled-read: $(VENV)/.installed-bench
	$(PY) -m bench.tiled_read $(BENCH_ARGS)

# What a question on a kept state costs a row: four 12-token questions on their own states in one call,
# through the engine and bare llama.cpp contexts, unified or a cache stream a sequence (docs/benchmarks.md).
.PHONY: bench-question-cost
bench-question-cost: $(VENV)/.installed-bench
	$(PY) -m bench.question_cost $(BENCH_ARGS)

# Where W3-fresh's time goes at 4 clients: first, second and later questions on each new state, the fleet
# in both modes beside llama-server, request by request (docs/benchmarks.md).
.PHONY: bench-w3-phases
bench-w3-phases: $(VENV)/.installed-bench
	$(PY) -m bench.w3_phases $(BENCH_ARGS)

# One request at a time to a 1-worker fleet: W1, W3, a 20-question request, a 255-option choice.
.PHONY: bench-shapes
bench-shapes: $(VENV)/.installed-bench
	$(PY) -m bench.request_shapes $(BENCH_ARGS)

# The limit as a figure: the engine alone on first-seen requests back to back, beside the fleet and
# llama-server on the same requests, taking turns; ratios to llama-server, the reference. BENCH_ARGS="--targets
# floor,jevfleet,jevfleet-native" instead shows what the portable build costs on this CPU.
.PHONY: bench-floor
bench-floor: $(VENV)/.installed-bench
	$(PY) -m bench.floor $(BENCH_ARGS)

# Do answers move under load: the same first-seen requests at 1 and at 8 clients, each pass to a freshly
# started server, ours and llama-server; identical answers, largest |ΔP|, flips across 0.5.
.PHONY: bench-consistency
bench-consistency: $(VENV)/.installed-bench
	$(PY) -m bench.consistency $(BENCH_ARGS)

# The first requests of a workload sent again and again, to a default fleet and to llama-server.
.PHONY: bench-repeats
bench-repeats: $(VENV)/.installed-bench
	$(PY) -m bench.repeats $(BENCH_ARGS)

# W3 at 4 users on a fresh fleet and on one that answered W1 first, in turns (issue 12's relocation fix).
.PHONY: bench-history
bench-history: $(VENV)/.installed-bench
	$(PY) -m bench.fleet_history $(BENCH_ARGS)

# The same closed-loop load on fleets of different shapes: 1 worker × 2 threads vs 2 × 1 here.
# BENCH_ARGS=--quick for a short run; --shapes 1x2,2x2,4x2,8x2 on a bigger machine.
.PHONY: bench-scaling
bench-scaling: $(VENV)/.installed-bench
	$(PY) -m bench.scaling $(BENCH_ARGS)

# Compare prompt formats of the default profile on the fit half of eval/yesno.jsonl (docs/quality.md).
.PHONY: prompt-variants
prompt-variants: $(VENV)/.installed-bench
	$(PY) -m bench.prompt_variants $(VARIANT_FLAGS)

# How far choice / merged-option / score-threshold answers are from the relations probabilities
# must satisfy, on the test half (docs/quality.md). BENCH_ARGS="--profile gemma-3-270m --head off".
.PHONY: coherence
coherence: $(VENV)/.installed-bench
	$(PY) -m bench.coherence $(BENCH_ARGS)

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
	$(PY) -m jevfleet.harness.chaos --duration $(CHAOS_DURATION) --seed $(CHAOS_SEED) --out $(CHAOS_OUT) $(CHAOS_ARGS)

# About 10,000 generated and mutated requests (bodies, headers, byte-level damage, compression bombs,
# lying Content-Length, other text encodings, huge numbers, deep nesting) against a real fleet:
# 0 responses >= 500, 0 hangs, 0 worker restarts, and the tally printed (`make test` runs a quarter).
.PHONY: fuzz
fuzz: $(VENV)/.installed-test
	JEV_FUZZ_FLEET=1 JEV_FUZZ_SCALE=$(or $(FUZZ_SCALE),4) $(PY) -m pytest tests/test_fuzz.py -q -s -p no:cacheprovider

# Overload soak and refusal speed: warm-up, a burst of 400 (time to a 429; the same burst at a bare
# aiohttp server that only refuses, for the floor), 200 closed-loop clients for 5 minutes, then 1 minute
# at normal load; RSS, open fds and latency (with the Server-Timing phases) before/after. About 8 minutes.
# SOAK_ARGS="--overload-s 60 --normal-s 30 --warmup-s 30" for a shorter run; "--overload-s 0 --bursts 3"
# for the bursts only.
.PHONY: soak
soak: $(VENV)/.installed-bench
	$(PY) -m bench.soak $(SOAK_ARGS)
# Served margins against llama.cpp's most exact reading of the same tokens (one pass, F32 K/V, no flash
# attention), path by path: cache type, flash attention, pieces, padding, preamble, snapshots in cells and host memory.
.PHONY: bench-exact
bench-exact: $(VENV)/.installed-bench
	$(PY) -m bench.exact $(BENCH_ARGS)

.PHONY: bench-readout
# Which way of reading the answer ranks best (token sets, hidden state vs llama.cpp logits row), per split and tag.
bench-readout: $(VENV)/.installed-bench
	$(PY) -m bench.readout $(BENCH_ARGS)

# The model zoo (issue 38; bench/zoo.py): seeded random-weight GGUFs with real models' shapes, tokenizers
# and chat templates, quantized Q4_K_M by llama.cpp's quantizer, into cache_dir/zoo/ (kept by recipe).
# Default: Llama 3.2 1B, Qwen 2.5 1.5B, Gemma 3 1B; ZOO="llama-3.2-3b phi-3.5-mini gemma-2-2b minicpm-1b"
# for the others (each 1.5-5 min on two cores, F16 file of 2-8 GB on disk while it is quantized).
.PHONY: zoo
zoo: $(STAMP)
	$(PY) -m bench.zoo $(ZOO)

# Each zoo file served as a user would (time to ready, RSS, canary figures; bench/zoo_serve.py), then
# beside llama-server on the same file: bench.floor, the sweep at 1 and 4 clients, bench.consistency.
# ZOO as for `make zoo` (default: every recipe); ZOO_MODE=fast for a file refused in deterministic mode.
.PHONY: bench-zoo
bench-zoo: $(VENV)/.installed-bench
	$(PY) -m bench.zoo_serve --speed $(if $(ZOO_MODE),--mode $(ZOO_MODE)) $(ZOO)
