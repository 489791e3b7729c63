# The two commands: `make demo` and `make test`. Both create .venv when it is
# missing and install Kale into it first.

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PYTEST_ARGS ?=

.PHONY: demo test install clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# Reinstall when the packaging changes; the stamp records the last install.
$(VENV)/.installed: setup.py | $(BIN)/python
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[local,dev]'
	@touch $@

install: $(VENV)/.installed

demo: $(VENV)/.installed
	$(BIN)/python -m example.demo

test: $(VENV)/.installed
	$(BIN)/python -m pytest $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
