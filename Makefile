# The two commands: `make demo` and `make test`. Both create .venv when it is
# missing and install Kale into it first. `make test` runs the lint, the type
# check and the whole suite; `make test-fast` skips the slow end-to-end tests
# for the edit loop.

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PYTEST_ARGS ?=
# Most tests wait on processes and sockets rather than compute, so several
# run at once even on two cores.
WORKERS ?= 6

.PHONY: demo test test-fast lint types install clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# Reinstall when the packaging changes; the stamp records the last install.
$(VENV)/.installed: setup.py | $(BIN)/python
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[local,records,postgres,web,submit,metrics,otel,webhooks,schedules,dev]'
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
	$(BIN)/python -m pytest -n $(WORKERS) $(PYTEST_ARGS)

test-fast: $(VENV)/.installed
	$(BIN)/python -m pytest -n $(WORKERS) -m 'not slow' $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache
