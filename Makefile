# The two commands: `make demo` and `make test`. Both create .venv when it is
# missing and install Kale into it first. `make test` runs the lint, the type
# check and the suite but its tests marked slow (real processes for seconds,
# the demo, the benchmarks, the chaos run), in about three minutes on two cores;
# `make test-slow` runs those; CI runs both (.ci/run). `make test-fast` is
# `make test` without the lint and the type check, for the edit loop.

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PYTEST_ARGS ?=
# Most tests wait on processes and sockets rather than compute, so several
# run at once even on two cores.
WORKERS ?= 6
# Tests and the processes they start compile Kale and the test modules once
# and keep the bytecode (and pytest its rewritten asserts): with
# PYTHONDONTWRITEBYTECODE set, every xdist worker and every `kale` process a
# test starts would compile them again.
unexport PYTHONDONTWRITEBYTECODE

.PHONY: demo test test-slow test-fast lint types install clean docs docs-serve

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# Reinstall when the packaging changes; the stamp records the last install.
$(VENV)/.installed: setup.py | $(BIN)/python
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[local,records,postgres,web,submit,metrics,otel,webhooks,schedules,django,docs,dev]'
	@touch $@

install: $(VENV)/.installed

# `make demo WEB=1` leaves `kale web` running on the demo's records at the end.
demo: $(VENV)/.installed
	KALE_DEMO_WEB=$(WEB) $(BIN)/python -m example.demo

lint: $(VENV)/.installed
	$(BIN)/ruff check .
	$(BIN)/lint-imports

types: $(VENV)/.installed
	$(BIN)/mypy

test: lint types
	$(BIN)/python -m pytest -n $(WORKERS) -m 'not slow' $(PYTEST_ARGS)

test-slow: $(VENV)/.installed
	$(BIN)/python -m pytest -n $(WORKERS) -m slow $(PYTEST_ARGS)

test-fast: $(VENV)/.installed
	$(BIN)/python -m pytest -n $(WORKERS) -m 'not slow' $(PYTEST_ARGS)

# The docs site, from docs/ and mkdocs.yml into site/: strict, so any
# warning, broken link or missing reference fails. The reference pages are
# made from the code as it builds (docs/_tools/reference.py).
export NO_MKDOCS_2_WARNING = 1
docs: $(VENV)/.installed
	$(BIN)/mkdocs build --strict

docs-serve: $(VENV)/.installed
	$(BIN)/mkdocs serve --strict --dev-addr 127.0.0.1:8001

clean:
	rm -rf $(VENV) build site *.egg-info .pytest_cache .mypy_cache .ruff_cache
