# Two commands: `make demo` and `make test`. Both create .venv and install the project when it is missing
# (and then compile the simulation kernels once: python -m sim.warmup). `make demo` installs the runtime
# dependencies only; `make test` adds the `test` extra (pytest, the linter and the independent references:
# Pinocchio alone is about 380 MB).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
RUNTIME := $(VENV)/.installed
TESTING := $(VENV)/.installed-test

.PHONY: demo test lint bench clean system-tools

# The install: the venv when missing, then the project with the extras named ($(1)). Then the simulation kernels
# are compiled (once, into numba's on-disk cache next to the sources), so that no first run pays the compile inside
# what it measures.
define install
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '$(1)'
endef

$(RUNTIME): pyproject.toml
	$(call install,.)
	$(BIN)/python -m sim.warmup
	touch $(RUNTIME)

# The runtime and the test extra in one pip run (one resolve, one editable build, one warm-up), marking both
# installed. After `make demo` this adds the extra; the warm-up then compiles nothing unless the resolver moved
# numpy or numba (every kernel is cached for the installed versions). PyElastica's kernels (a test reference that
# compiles on first use, cached in its install) are compiled beside the warm-up, on the core it leaves idle while
# it imports (docs/install.md). Its wait has a limit: 28 s of CPU when it compiles, 600 s is that at a twentieth of a
# core; past it the job is ended (SIGTERM, SIGKILL 10 s later) and the line fails saying so, instead of holding CI.
PYELASTICA_WARMUP_LIMIT_S := 600
$(TESTING): pyproject.toml
	$(call install,.[test])
	timeout --kill-after=10 $(PYELASTICA_WARMUP_LIMIT_S) $(BIN)/python tests/cosserat/warm_pyelastica.py & \
	    references=$$!; $(BIN)/python -m sim.warmup; warmed=$$?; \
	    wait $$references || { status=$$?; echo "tests/cosserat/warm_pyelastica.py failed (exit $$status; 124: still" \
	        "running after $(PYELASTICA_WARMUP_LIMIT_S) s)" >&2; exit $$status; }; exit $$warmed
	touch $(RUNTIME) $(TESTING)

demo: $(RUNTIME)
	$(BIN)/mms demo

# The linter first: it takes seconds and its findings are cheaper to read than a failing suite. The 25 slowest
# tests are listed at the end, so that a CI log shows where the suite's time goes.
lint: $(TESTING)
	$(BIN)/ruff check .

# tests/firmware/test_fw_board_qemu.py cross-compiles the STM32F405 board port and runs it in QEMU: Debian's
# toolchain and emulator, installed when missing (docs/firmware.md: about 60 s and 0.9 GB; sudo unless root).
system-tools:
	@if ! command -v arm-none-eabi-gcc >/dev/null || ! command -v qemu-system-arm >/dev/null; then \
	    sudo=$$([ "$$(id -u)" -eq 0 ] || echo sudo); \
	    echo "installing Debian's gcc-arm-none-eabi, libnewlib-arm-none-eabi and qemu-system-arm (the board port's tests)"; \
	    $$sudo apt-get update -qq && \
	    $$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
	        gcc-arm-none-eabi libnewlib-arm-none-eabi qemu-system-arm; \
	fi

test: lint system-tools
	QT_QPA_PLATFORM=offscreen $(BIN)/python -m pytest -q --durations=25

bench: $(TESTING)
	for b in benchmarks/bench_*.py; do echo "== $$b"; $(BIN)/python $$b || exit 1; done

clean:
	rm -rf $(VENV) build *.egg-info
