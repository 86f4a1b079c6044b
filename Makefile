# madlab: `make demo` runs a debate experiment offline; `make test` runs every test.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
CORE := $(VENV)/.madlab-core
DEV := $(VENV)/.madlab-dev
HF := $(VENV)/.madlab-hf
# A second venv with the lowest versions the hf extra allows (tools/lowest-hf.txt), for `make test-lowest`.
LOWEST := .venv-lowest
LOW := $(LOWEST)/.madlab-lowest
# torch 2.13.0 has a local CPU wheel here; anywhere else fall back to PyTorch's CPU index.
TORCH := torch==2.13.0

.PHONY: demo demo-real lab test test-lowest export outputs readme bench clean

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

# The core install carries the lab extra (JupyterLab): madlab is used from JupyterLab, and `make lab` opens the notebooks.
$(CORE): pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e ".[lab]"
	touch $@

$(DEV): pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q $(TORCH) || $(BIN)/pip install -q $(TORCH) --index-url https://download.pytorch.org/whl/cpu
	$(BIN)/pip install -q -c tools/dev-constraints.txt -e ".[dev]"
	touch $(CORE) $(HF) $@

$(HF): pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q $(TORCH) || $(BIN)/pip install -q $(TORCH) --index-url https://download.pytorch.org/whl/cpu
	$(BIN)/pip install -q -e ".[hf,lab]"
	touch $(CORE) $@

$(LOW): pyproject.toml tools/lowest-hf.txt
	$(PY) -m venv $(LOWEST)
	$(LOWEST)/bin/python -m pip install -q --upgrade pip
	$(LOWEST)/bin/pip install -q -c tools/lowest-hf.txt $(TORCH) || $(LOWEST)/bin/pip install -q -c tools/lowest-hf.txt $(TORCH) --index-url https://download.pytorch.org/whl/cpu
	$(LOWEST)/bin/pip install -q -c tools/lowest-hf.txt -e ".[hf]" pytest pytest-asyncio psutil jsonschema
	touch $@

demo: $(CORE)
	$(BIN)/madlab run controlmad --size 6 --games 1-20 --out results/

# JupyterLab on the notebooks (nbs/), installed by `make demo`.
lab: $(CORE)
	$(BIN)/jupyter lab nbs/

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
	MADLAB_SERVER_NOTES=off $(BIN)/nbdev-test --n-workers 2
	$(BIN)/python -m pytest -q -n 2 --durations=15 tests

# The hf tests once more under the lowest versions the hf extra allows; SmolLM2 is converted there too, in its own folder.
# Left out: `transformers serve` (the serve extra), the ControlMAD game and the notebook (minutes; nothing version-bound).
test-lowest: $(LOW)
	MADLAB_MODELS=$(LOWEST)/models $(LOWEST)/bin/python -m pytest -q --durations=5 tests/test_hf_backend.py tests/test_prefix_reuse.py \
		tests/test_smollm2.py -k "not transformers_serve and not three_smollm2_agents and not real_model_notebook"

export: $(DEV)
	$(BIN)/nbdev-export && $(BIN)/nbdev-clean && $(BIN)/python tools/readme.py

# Run the notebooks that keep their outputs (tools/keep_outputs.py KEEP) and store them: figures with a PNG beside them, the
# stepper as snapshots. Other notebooks: `make outputs NBS="01_backends 23_runs"`.
outputs: $(DEV)
	$(BIN)/python tools/keep_outputs.py $(NBS)
	$(BIN)/python tools/readme.py

bench: $(DEV)
	for f in bench/bench_*.py; do echo "== $$f"; $(BIN)/python $$f || exit 1; done

clean:
	rm -rf $(VENV) $(LOWEST) results runs
