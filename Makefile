# The two commands of the README:
#   make demo   install (once) and train + test the LSTM baseline on the bundled demo corpus
#   make test   install (once), lint and run the test suite
# TORCH is what pip installs for PyTorch first; the default is the CPU build (no CUDA wheels).
# On a GPU machine: make install TORCH=torch
VENV  ?= .venv
TORCH ?= torch==2.13.0+cpu
PY    := $(VENV)/bin/python

.PHONY: install demo test lint smoke results references gpu-check gpu-wheels
install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q $(TORCH)
	$(PY) -m pip install -q -e ".[dev,launchers,optuna]"
	touch $@

demo: install
	$(PY) src/train.py experiment=demo

# Regenerate the results tables of README.md, docs/RESULTS.md and docs/DCNN_RESULTS.md from the
# per-run records under docs/results/*/runs, and docs/peer_speed.md's from
# docs/results/peer_speed/records (CI checks they are current: tests/test_results_tables.py,
# tests/test_peer_speed.py).
results: install
	$(PY) src/report.py --leaderboard docs/results --write README.md docs/RESULTS.md \
	    docs/DCNN_RESULTS.md
	$(PY) benchmarks/peer_speed.py table docs/results/peer_speed --write docs/peer_speed.md

# Regenerate the weight-transfer fixtures tests/models/NAME/NAME.pt (each beside its generator,
# make_fixture.py), bit for bit, from git clones of the third-party repositories in CHECKOUTS
# (one per repository); CHECK=1 writes nothing and compares byte for byte; REFERENCES_ARGS passes
# the other interpreters some of them need (tests/references/README.md).
references: install
	$(if $(CHECKOUTS),,$(error give CHECKOUTS=DIR, the folder of the clones: tests/references/README.md))
	$(PY) tests/references/regenerate.py --checkouts $(CHECKOUTS) $(if $(CHECK),--check) \
	    $(REFERENCES_ARGS)

lint: install
	$(VENV)/bin/ruff check src tests benchmarks

# The suite on every core (pytest-xdist); tests sharing a module's trained run stay together
# (tests/conftest.py: SHARED_RUNS). A plain `pytest` runs serially.
test: lint
	$(PY) -m pytest -q -n auto --dist loadgroup

# What CI runs after the tests: the user-facing DIN sweep (6 jobs) on the bundled demo corpus
# with a tiny budget, then the report on that multirun folder, which must hold 6 result rows;
# then every Table 2 row (19 experiment files) the same way: the report must show each row run
# and none "not implemented".
SMOKE_DIR ?= multirun/smoke
TABLE2_ROWS := $(shell seq -s, -f 'table2/row%02g' 1 19)
smoke: install
	rm -rf $(SMOKE_DIR)
	$(PY) src/train.py -m model=din1,din2 dim=256,324,400 data=demo debug=tiny logger=csv \
	    hydra.sweep.dir=$(SMOKE_DIR)/din
	$(PY) src/report.py $(SMOKE_DIR)/din --out $(SMOKE_DIR)/din
	$(PY) -c "import csv, sys; rows = [r for r in csv.DictReader(open('$(SMOKE_DIR)/din/report.csv')) \
	    if r['completed'] == '1']; print(len(rows), 'result rows'); sys.exit(len(rows) != 6)"
	$(PY) src/train.py -m experiment=$(TABLE2_ROWS) data=demo embeddings=random embeddings.dim=16 \
	    debug=tiny logger=csv hydra.sweep.dir=$(SMOKE_DIR)/table2
	$(PY) src/report.py $(SMOKE_DIR)/table2 --out $(SMOKE_DIR)/table2
	$(PY) .ci/check_table2_smoke.py $(SMOKE_DIR)/table2/report.csv

# The GPU check (benchmarks/gpu_check.py; README "GPU check"): every model on the device against
# the CPU (float64) and in bf16-mixed, timed training windows of five models, a projection of
# Table 2 on the full SNLI, a record under docs/results/gpu/. It runs where there is no network
# and no .venv: the Python that has torch, Lightning and torchmetrics (PYTHON=...), the missing
# Hydra / OmegaConf / pytest unpacked from the wheels that `make gpu-wheels` fetched here.
# `make gpu-check DEVICE=cpu` is its dry run (small windows and batches; CI runs it).
# COMMIT=SHA names the commit where the copy has no .git; GPU_ARGS="..." adds options
# (e.g. --data PATH, --skip numerics, --out DIR).
DEVICE     ?= cuda
GPU_WHEELS ?= .gpu-wheels
PYTHON     ?= $(if $(wildcard $(PY)),$(PY),python3)
COMMIT     ?= $(shell git rev-parse HEAD 2>/dev/null)
GPU_ARGS   ?=
gpu-check:
	GPU_CHECK_COMMIT=$(COMMIT) $(PYTHON) benchmarks/gpu_check.py \
	    --device $(DEVICE) --wheels $(GPU_WHEELS) $(GPU_ARGS)

gpu-wheels:
	$(PYTHON) benchmarks/gpu_check.py --fetch-wheels $(GPU_WHEELS)
