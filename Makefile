# Two commands: `make demo` and `make test`. Both create .venv and install the project when it is missing
# (and then compile the simulation kernels once: python -m sim.warmup).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test bench clean

# After the install, the simulation kernels are compiled (once, into numba's on-disk cache next to the sources)
# so that no first run pays the compile inside what it measures.
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	$(BIN)/python -m sim.warmup
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/mms demo

test: $(STAMP)
	QT_QPA_PLATFORM=offscreen $(BIN)/python -m pytest -q

bench: $(STAMP)
	for b in benchmarks/bench_*.py; do echo "== $$b"; $(BIN)/python $$b || exit 1; done

clean:
	rm -rf $(VENV) build *.egg-info
