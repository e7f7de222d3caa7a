# The two commands a new user runs: `make demo` (the main job) and `make test` (every test).
# Each creates or reuses .venv and installs what it needs; nothing but Python >= 3.10 and
# make is assumed.

PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin

.PHONY: demo test lint typecheck pytest bench schema clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# Re-install when the project's metadata changes.
$(VENV)/.installed-demo: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --disable-pip-version-check -q -e '.[cli]'
	@touch $@

$(VENV)/.installed-test: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --disable-pip-version-check -q -e '.[test]'
	@touch $@

demo: $(VENV)/.installed-demo
	$(BIN)/toolstream demo

test: lint typecheck pytest

lint: $(VENV)/.installed-test
	$(BIN)/ruff check toolstream tests benchmarks
	$(BIN)/ruff format --check toolstream tests benchmarks

typecheck: $(VENV)/.installed-test
	$(BIN)/mypy

pytest: $(VENV)/.installed-test
	$(BIN)/pytest

bench: $(VENV)/.installed-test
	$(BIN)/python -m benchmarks

# Regenerate docs/schema/native-v1.json after changing the event classes.
schema: $(VENV)/.installed-test
	$(BIN)/python -m toolstream.schema > docs/schema/native-v1.json

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .hypothesis
