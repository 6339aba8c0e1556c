# One target per habit. `make run` and `make test` are the two commands of the README.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml dev/pyproject.toml constraints.txt 2>/dev/null | sha256sum | cut -c1-12)

.PHONY: setup sources-setup jars run test test-unit test-defs test-integration lint format typecheck dev screenshot docs bench clean

setup: $(STAMP) jars sources-setup

$(STAMP): pyproject.toml dev/pyproject.toml constraints.txt
	@command -v $(PYTHON) >/dev/null || { echo "python3 not found: install Python 3.11"; exit 1; }
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -c constraints.txt -e '.[dev]' -e ./dev
	rm -f $(VENV)/.installed-* && touch $@

jars: $(STAMP)
	$(BIN)/cdc-assets jars

# MariaDB and PostgreSQL from Debian's packages for `cdc-assets stack up --sources` (root only)
sources-setup:
	sh scripts/install_sources.sh

run: setup
	$(BIN)/cdc-assets run

# Lint and type checks first (seconds), then every tier; the docs tests build the site.
test: setup lint typecheck
	$(BIN)/python -m pytest

test-unit: $(STAMP)
	$(BIN)/python -m pytest -m unit

test-defs: $(STAMP)
	$(BIN)/python -m pytest -m defs

test-integration: setup
	$(BIN)/python -m pytest -m integration

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports

format: $(STAMP)
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

typecheck: $(STAMP)
	$(BIN)/mypy

# The specs `make run` evolved (its copy under the home) when there are any, else table_specs/.
DEMO_SPECS = $${CDC_ASSETS_HOME:-.cdc-assets}/demo-specs
SPECS_FOR_UI = $${CDC_ASSETS_SPECS:-$$(test -d $(DEMO_SPECS) && echo $(DEMO_SPECS) || echo table_specs)}

# Runs started from the UI share the stack's Spark Connect server (one warm driver).
# exec: make's SIGTERM reaches `cdc-assets dev` itself, which stops dagster dev's process group.
dev: setup
	CDC_ASSETS_SPECS=$(SPECS_FOR_UI) exec $(BIN)/cdc-assets dev

# docs/asset-graph.png and docs/ledger-partitions.png from the instance of the last `make run` (headless Chromium)
screenshot: $(STAMP)
	CDC_ASSETS_SPECS=$(SPECS_FOR_UI) $(BIN)/python scripts/screenshot_asset_graph.py
	CDC_ASSETS_SPECS=$(SPECS_FOR_UI) $(BIN)/python scripts/screenshot_asset_graph.py \
		--asset cdc/users_cdc --out docs/ledger-partitions.png

# The docs site: reference pages from the code, then site/ (strict: a broken link fails)
docs: $(STAMP)
	$(BIN)/python scripts/generate_docs.py
	NO_MKDOCS_2_WARNING=1 $(BIN)/python -m mkdocs build --strict

bench: setup
	$(BIN)/python benchmarks/definitions_load.py

clean:
	-$(BIN)/cdc-assets stack down --purge
	rm -rf $(VENV) .cdc-assets
