# madlab: `make demo` runs a debate experiment offline; `make test` runs every test.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
CORE := $(VENV)/.madlab-core
DEV := $(VENV)/.madlab-dev
HF := $(VENV)/.madlab-hf
# torch 2.13.0 has a local CPU wheel here; anywhere else fall back to PyTorch's CPU index.
TORCH := torch==2.13.0

.PHONY: demo demo-real test export readme bench clean

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

$(CORE): pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e .
	touch $@

$(DEV): pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q $(TORCH) || $(BIN)/pip install -q $(TORCH) --index-url https://download.pytorch.org/whl/cpu
	$(BIN)/pip install -q -e ".[dev]"
	touch $(CORE) $(HF) $@

$(HF): pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q $(TORCH) || $(BIN)/pip install -q $(TORCH) --index-url https://download.pytorch.org/whl/cpu
	$(BIN)/pip install -q -e ".[hf]"
	touch $(CORE) $@

demo: $(CORE)
	$(BIN)/madlab run controlmad --size 6 --games 1-20 --out results/

# One ControlMAD game with three real SmolLM2-135M-Instruct agents, offline (the model comes from its PyPI wheel).
# A few minutes on a 2-core CPU: ControlMAD's prompts are long, so this skips the per-player debates and self-adjustment.
# Each reply is held to the game's answer schema (--structured auto): all valid; the summary puts the accuracy beside chance.
demo-real: $(HF)
	$(BIN)/madlab models get smollm2
	$(BIN)/madlab run controlmad --size 4 --games 1 --depth 0 --no-self-adjustment --max-tokens 128 --temperature 0 \
		--agents "hf:smollm2;hf:smollm2;hf:smollm2" --no-cache --out results/

test: $(DEV)
	$(BIN)/python tools/check_export.py
	$(BIN)/python tools/readme.py --check
	$(BIN)/nbdev-test --n-workers 2
	$(BIN)/python -m pytest -q --durations=15 tests

export: $(DEV)
	$(BIN)/nbdev-export && $(BIN)/nbdev-clean && $(BIN)/python tools/readme.py

bench: $(DEV)
	for f in bench/bench_*.py; do echo "== $$f"; $(BIN)/python $$f || exit 1; done

clean:
	rm -rf $(VENV) results runs
