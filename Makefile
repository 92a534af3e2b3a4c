# Two user-facing targets, each working on a fresh clone with only Python 3.11 available:
#   make repro   set up .venv and run the pipeline (dvc repro)
#   make test    set up .venv with the dev extra and run lint and tests
# Installs are pinned by constraints.txt (see its header for how to regenerate it).

PYTHON ?= $(shell command -v python3.11 >/dev/null 2>&1 && echo python3.11 || echo python3)
VENV   ?= .venv
BIN    := $(VENV)/bin

.PHONY: repro test venv venv-dev

# Stage commands call `python`, so the venv's bin leads PATH.
repro: venv
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/dvc repro

test: venv-dev
	$(BIN)/ruff check .
	$(BIN)/python -m pytest

# One recipe creates the venv and installs the package; EXTRAS selects the extras.
# bfcl-eval (BFCL v4 multi-turn, src/interlock/evaluation/bfcl.py) goes in with --no-deps: its declared
# dependencies pin an old numpy and bring API clients, faiss and sentence-transformers, while its
# multi-turn checker and simulated APIs need only the standard library plus mpmath (pinned in
# constraints.txt; torch's sympy brings it).
# The last step probes whether this machine can build the sandbox boundary for model-written
# checks and records the answer in the venv (docs/judging.md); it never fails the set-up.
venv venv-dev:
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -c constraints.txt -e '.$(EXTRAS)'
	$(BIN)/python -m pip install --no-deps bfcl-eval==2026.3.23
	$(BIN)/python -m interlock.judging.sandbox

venv-dev: EXTRAS = [dev]
