# streamproc — every target installs into ./.venv first (idempotent), so a fresh machine
# with Python 3.11 and make needs nothing else.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp

.PHONY: install run test test-ui lint format schemas bench clean

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --upgrade pip
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[dev]'
	@touch $(STAMP)

install: $(STAMP)

run: $(STAMP)
	$(BIN)/streamproc up --demo

# Two test processes (pytest-xdist): most tests wait on servers and subprocesses, so two share
# two cores well; each has its own nats-server and temporary directories.
test: $(STAMP) lint
	$(BIN)/pytest -q -n 2 --dist worksteal

# Browser tests of the console: Playwright drives Debian's Chromium (never a downloaded one).
test-ui: $(STAMP)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check 'playwright>=1.45'
	@if [ ! -x /usr/bin/chromium ]; then \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && apt-get install -y -qq chromium; \
	  else echo "test-ui: /usr/bin/chromium missing: sudo apt-get install -y chromium" >&2; exit 1; fi; fi
	$(BIN)/pytest -q tests/console -m ui

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports
	$(BIN)/mypy

format: $(STAMP)
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

schemas: $(STAMP)
	$(BIN)/streamproc schemas --out schemas --catalog docs/events.md
	$(BIN)/streamproc config reference --out docs/configuration.md
	$(BIN)/python -m streamproc.configfile.generate --out streamproc/configfile/sections.py
	$(BIN)/python -m streamproc.gateway.api.openapi --out schemas/openapi.json
	$(BIN)/python -m streamproc.notify.schemas --out schemas/notify
	$(BIN)/streamproc streams export --out deploy/nats/streams

bench: $(STAMP)
	@set -e; for f in bench/*.py; do echo "== $$f"; $(BIN)/python $$f; done

clean:
	rm -rf $(VENV) data .pytest_cache .ruff_cache .import_linter_cache *.egg-info
