# streamproc — every target installs into ./.venv first (idempotent), so a fresh machine
# with Python 3.11 and make needs nothing else.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp

.PHONY: install run test lint format schemas bench clean

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --upgrade pip
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[dev]'
	@touch $(STAMP)

install: $(STAMP)

run: $(STAMP)
	$(BIN)/streamproc up --demo

test: $(STAMP) lint
	$(BIN)/pytest -q

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: $(STAMP)
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

schemas: $(STAMP)
	$(BIN)/streamproc schemas --out schemas --catalog docs/events.md
	$(BIN)/python -m streamproc.gateway.openapi --out schemas/openapi.json
	$(BIN)/python -m streamproc.notify.schemas --out schemas/notify
	$(BIN)/streamproc streams export --out deploy/nats/streams

bench: $(STAMP)
	@set -e; for f in bench/*.py; do echo "== $$f"; $(BIN)/python $$f; done

clean:
	rm -rf $(VENV) data .pytest_cache .ruff_cache *.egg-info
