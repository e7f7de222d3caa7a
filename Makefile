# The two commands a new user runs: `make demo` (the main job) and `make test` (every test).
# Each creates or reuses .venv and installs what it needs; nothing but Python >= 3.10 and
# make is assumed.

PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin

.PHONY: demo test lint typecheck pytest bench schema chat-bundle clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# Re-install when the project's metadata changes.
$(VENV)/.installed-demo: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --disable-pip-version-check -q -e '.[cli]'
	@touch $@

$(VENV)/.installed-test: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --disable-pip-version-check -q -e '.[test]'
	@touch $@

# make demo HOST=0.0.0.0 PORT=9000, and ARGS="--turns 3 --speed 2" for more options.
# make demo AGENT=langgraph (or pydantic-ai, openai-agents): the scenario through that
# framework and its own fake model (its extra is installed first).
HOST ?= 127.0.0.1
PORT ?= 8765
ARGS ?=
AGENT ?= simulated

demo: $(VENV)/.installed-demo
	@if [ "$(AGENT)" != "simulated" ]; then \
		$(BIN)/python -m pip install --disable-pip-version-check -q -e '.[cli,$(AGENT)]'; fi
	$(BIN)/toolstream demo --host $(HOST) --port $(PORT) --agent $(AGENT) $(ARGS)

test: lint typecheck pytest

lint: $(VENV)/.installed-test
	$(BIN)/ruff check toolstream tests benchmarks
	$(BIN)/ruff format --check toolstream tests benchmarks

typecheck: $(VENV)/.installed-test
	$(BIN)/mypy

# The peers' own validators and chat clients (npm "ai" 7 and 6, "@ai-sdk/react" 4 and 3,
# "@ag-ui/client", esbuild for the useChat pages), pinned by the lock file.
# Without npm the interop tests skip, saying why (CI requires them).
INTEROP := tests/interop/node_modules/.package-lock.json

$(INTEROP): tests/interop/package-lock.json
	@if command -v npm >/dev/null 2>&1; then \
		cd tests/interop && npm ci --no-audit --no-fund --loglevel=error; \
	else \
		echo "npm not found: the Node interop checks will be skipped"; \
	fi

# The chat pages' build (npm "ai", "@langchain/langgraph-sdk" and esbuild, pinned): a test
# rebuilds the committed toolstream/demo/static/chat.js and usestream.js and compares.
# `make demo` never needs them.
CHAT_WEB := web/chat/node_modules/.package-lock.json

$(CHAT_WEB): web/chat/package-lock.json
	@if command -v npm >/dev/null 2>&1; then \
		cd web/chat && npm ci --no-audit --no-fund --loglevel=error; \
	else \
		echo "npm not found: the chat bundle check will be skipped"; \
	fi

pytest: $(VENV)/.installed-test $(INTEROP) $(CHAT_WEB)
	$(BIN)/pytest

# Rebuild toolstream/demo/static/chat.js and usestream.js after changing web/chat/src.
chat-bundle: $(CHAT_WEB)
	cd web/chat && node build.mjs

bench: $(VENV)/.installed-test
	$(BIN)/python -m benchmarks

# Regenerate docs/schema/native-v1.json after changing the event classes.
schema: $(VENV)/.installed-test
	$(BIN)/python -m toolstream.schema > docs/schema/native-v1.json

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .hypothesis
