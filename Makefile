# The two commands of the README:
#   make demo   install (once) and train + test the LSTM baseline on the bundled demo corpus
#   make test   install (once), lint and run the test suite
# TORCH is what pip installs for PyTorch first; the default is the CPU build (no CUDA wheels).
# On a GPU machine: make install TORCH=torch
VENV  ?= .venv
TORCH ?= torch==2.13.0+cpu
PY    := $(VENV)/bin/python

.PHONY: install demo test lint smoke
install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q $(TORCH)
	$(PY) -m pip install -q -e ".[dev,launchers,optuna]"
	touch $@

demo: install
	$(PY) src/train.py experiment=demo

lint: install
	$(VENV)/bin/ruff check src tests benchmarks

test: lint
	$(PY) -m pytest -q

# What CI runs after the tests: a 2-job sweep on the demo corpus with a tiny budget.
smoke: install
	$(PY) src/train.py -m experiment=demo seed=1,2 debug=tiny logger=csv
