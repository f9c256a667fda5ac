# Everything a fresh machine needs, from the project's own files: a virtualenv with the
# client and its extras, the sandbox distribution (sandbox/), and anvil from package-lock.json.
# Redis and PostgreSQL (for the shared-budget and fleet tests) are set up by `make test`, not here.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# Tests cache bytecode even where PYTHONDONTWRITEBYTECODE is set: otherwise every worker,
# and every process a test starts, compiles the project again.
PYTEST := env -u PYTHONDONTWRITEBYTECODE $(PY) -m pytest

.PHONY: demo test test-fast test-unit test-flow test-integration lint check bench install clean redis-server postgresql test-environments

$(STAMP): pyproject.toml sandbox/pyproject.toml package.json package-lock.json
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]' -e './sandbox[mcp,cli,svm]'
	npm ci --no-audit --no-fund --loglevel=error
	touch $(STAMP)

# The x402 foundation's MCP server needs mcp 1.x, the paid-tool tests pay it from an mcp 1.x
# client too, the agent frameworks (examples/agents/) are no dependency of the client, the
# foundation's sign-in-with-x merchant needs a web3 older than 8, and the foundation's SVM
# client and facilitator need a `solana` older than 0.40, so each runs in an environment of
# its own, built once per machine (the 1.x client and the frameworks: once per checkout)
# under the user's cache directory (tests/mcp_foundation.py, tests/mcp1_client.py,
# tests/framework_tools.py, tests/siwx_foundation.py, sandbox/tests/svm_foundation.py). They
# are built here, before the tests start, rather than by the first test that needs them.
test-environments: $(STAMP)
	$(PY) -m tests.mcp_foundation
	$(PY) -m tests.mcp1_client
	$(PY) -m tests.framework_tools
	$(PY) -m tests.siwx_foundation
	$(PY) sandbox/tests/svm_foundation.py

# The shared-budget tests run a real Redis (Debian's redis-server); only the tests need it.
redis-server:
	@if command -v redis-server >/dev/null; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		echo "installing redis-server (apt-get) for the shared-budget tests"; \
		(apt-get update -qq && apt-get install -y -qq redis-server) >/dev/null; \
	else \
		echo "note: install redis-server (apt-get install redis-server) for the shared-budget tests"; \
	fi

# The fleet tests start PostgreSQL from its own binaries (initdb, pg_ctl: Debian's
# postgresql package, under /usr/lib/postgresql/*/bin), one cluster per test worker; as root
# they run it as the user nobody (tests/postgres_server.py).
postgresql:
	@if ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || command -v initdb >/dev/null; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		echo "installing postgresql (apt-get) for the fleet tests"; \
		(apt-get update -qq && apt-get install -y -qq postgresql) >/dev/null; \
	else \
		echo "note: install postgresql (apt-get install postgresql) for the fleet tests"; \
	fi

install: $(STAMP)

## The demo: the sandbox on 127.0.0.1 and a paid fetch on every rail.
demo: $(STAMP)
	$(VENV)/bin/x402-eur-sandbox demo

## The whole test suite, every lane and the sandbox's own tests, on every core (each worker
## runs its own sandbox).
test: $(STAMP) redis-server postgresql test-environments
	$(PYTEST) -n auto --dist loadfile --no-loadscope-reorder

## The fast lanes: pure unit tests and scripted-merchant flows (seconds, no servers).
test-fast: $(STAMP)
	$(PYTEST) -n auto tests/unit tests/flow

## One lane: make test-unit, test-flow or test-integration.
test-unit test-flow: $(STAMP)
	$(PYTEST) -n auto --dist loadfile --no-loadscope-reorder tests/$(@:test-%=%)

test-integration: $(STAMP) redis-server postgresql test-environments
	$(PYTEST) -n auto --dist loadfile --no-loadscope-reorder tests/integration

## Static checks: mypy --strict (the client, the sandbox and the benchmarks), the import
## layers (import-linter) and ruff.
lint: $(STAMP)
	$(PY) -m mypy x402_client sandbox/x402_eur_sandbox
	$(PY) -m mypy benchmarks
	$(VENV)/bin/lint-imports
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

check: test lint

## The benchmarks: every target and its measured value, as a table (printed), a chart and
## JSON in benchmarks/results/ (35-60 min on 2 shared cores; BENCH_FLAGS=--quick for a shorter run).
bench: $(STAMP)
	$(PY) -m pip install --quiet -e '.[dev,bench]'
	$(PY) benchmarks/run.py --out benchmarks/results $(BENCH_FLAGS)

clean:
	rm -rf $(VENV) node_modules .mypy_cache .ruff_cache .pytest_cache .hypothesis
