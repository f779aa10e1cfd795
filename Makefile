# reviewqueue: `make run` serves the dashboard (and runs the task worker), `make test` runs every test.
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
HOST ?= 127.0.0.1
PORT ?= 8000
# PostgreSQL variants of the concurrency tests (CI=true makes a missing server fail).
TEST_POSTGRES_URL ?= postgres://postgres@127.0.0.1:5432/postgres
# Its own Redis database: the suite clears the cache between tests.
TEST_REDIS_URL ?= redis://127.0.0.1:6379/1
# Two servers on one PostgreSQL + Redis; DATABASE_URL / REDIS_URL from the environment win.
CLUSTER_DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/reviewqueue
CLUSTER_REDIS_URL ?= redis://127.0.0.1:6379/0

DOCS_PORT ?= 8003

DEMO_PORT ?= 8001
DEMO_ROUNDS ?= 5
DEMO_WAIT ?= 10

.PHONY: install requirements run run-cluster test test-quick test-sqlite test-postgres lint lint-imports langgraph-venv docs docs-serve screenshots e2e e2e-browser e2e-axe ts-client prometheus pgbouncer demo bench soak clean

# requirements.txt takes the three locks (requirements/runtime.txt, test.txt, docs.txt), every
# package pinned with its hashes; their one source is requirements/*.in (`make requirements`).
LOCKS := requirements/runtime.txt requirements/test.txt requirements/docs.txt
$(VENV)/.installed: requirements.txt $(LOCKS) reviewqueue-client/pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet --require-hashes -r requirements.txt
	@# The client package (its tests run in test-sqlite, from pytest.ini's testpaths); its
	@# dependencies are in the runtime lock, and a local directory has no hash to check.
	$(PY) -m pip install --quiet --no-deps -e ./reviewqueue-client
	@touch $@

install: $(VENV)/.installed

# Recompile the locks from requirements/*.in after editing one (pip-tools, pinned in test.in); the
# pins already in a lock stay unless its .in changes them (`--upgrade-package NAME` via PIP_COMPILE_ARGS).
PIP_COMPILE_ARGS ?=
requirements: install
	cd requirements && for set in runtime test docs; do \
	  CUSTOM_COMPILE_COMMAND="make requirements" ../$(VENV)/bin/pip-compile --quiet --generate-hashes --strip-extras \
	    --no-emit-index-url --no-emit-find-links $(PIP_COMPILE_ARGS) --output-file $$set.txt $$set.in || exit 1; \
	done

# Development mode, asked for here: DEBUG is off unless set (and then SECRET_KEY and AUDIT_KEY
# must be set). `DEBUG=false make run` tries production settings (README, Configuration).
run: export DEBUG ?= true
run: install
	@$(PY) scripts/port_check.py $(HOST) $(PORT)
	@# migrate, seed_demo, recover (its items needing attention do not stop the start), collectstatic and
	@# the banner, in one Django start-up instead of five.
	$(PY) manage.py run_prepare --host $(HOST) --port $(PORT)
	PY=$(PY) HOST=$(HOST) PORT=$(PORT) scripts/run_with_worker.sh

run-cluster: export DEBUG ?= true
run-cluster: install
	DATABASE_URL="$${DATABASE_URL:-$(CLUSTER_DATABASE_URL)}" REDIS_URL="$${REDIS_URL:-$(CLUSTER_REDIS_URL)}" \
		PY=$(PY) HOST=$(HOST) scripts/run_cluster.sh

# The two passes run side by side, each with its own workers: much of either waits on servers,
# browsers, quiet periods and idle sockets rather than on the CPU, and they share nothing. The SQLite
# pass has its SQLite files (named by process) and its servers' Redis database 0 (real_server.py);
# the PostgreSQL pass has its test databases (named by process and worker) and TEST_REDIS_URL's
# database plus the worker number. Their output interleaves as it comes, so progress shows (make's
# output sync would hold each pass's until it ended; their summaries come at their own ends)
# (TEST_PASSES=1 runs them one after the other, as the two targets do alone).
TEST_PASSES ?= 2
# The two virtualenvs install side by side; the browser and Prometheus installs come after, one
# at a time (two apt-gets at once would fight over dpkg's lock); then the linters beside the
# strict docs build.
test: prometheus pgbouncer
	$(MAKE) --no-print-directory -j2 install langgraph-venv
	$(MAKE) --no-print-directory e2e-browser ts-client
	$(MAKE) --no-print-directory -j2 lint docs
	$(MAKE) --no-print-directory --output-sync=none -j$(TEST_PASSES) test-sqlite test-postgres

# The edit-test loop: the tests that start no process (no server, worker, agent, browser or command;
# conftest.py marks the others `processes`), on SQLite, two at a time. `make test` stays the whole run.
test-quick: install
	$(PY) -m pytest -m "not cluster and not processes" -n $(TEST_WORKERS) -q

# The documentation site (mkdocs.yml, Material), strict: a broken link or a missing page fails it.
# Its API reference is rendered from the OpenAPI schema at build time. The examples on its pages
# are run by moderation/tests/test_docs.py (in test-sqlite). The architecture diagram is drawn from
# the code first (scripts/architecture_diagram.py; a test fails while the committed one is stale).
docs: install
	$(PY) scripts/architecture_diagram.py
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict --quiet

docs-serve: install
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs serve --strict --dev-addr $(HOST):$(DOCS_PORT)

# The docs' screenshots (docs/img/), taken by a browser from a seeded server, never by hand.
screenshots: install e2e-browser
	$(PY) e2e/screenshots.py

# The layers in moderation/__init__.py: a package that imports one above it fails here.
lint-imports: install
	$(VENV)/bin/lint-imports --no-cache

# ruff (lint and format, the whole tree) and mypy (settings in pyproject.toml), then the import contracts.
lint: install lint-imports
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	DEBUG=true $(VENV)/bin/mypy

# Two workers, a test file each at a time: most of these tests wait on servers, browsers and
# barriers, so two at once nearly halve the pass. Each worker has its own test database
# (a SQLite file named by pid; PostgreSQL's named by worker) and, in the PostgreSQL pass,
# its own Redis database and channel prefix (conftest.py). Each pass's per-test times go to
# var/test-results/ (JUnit XML): `scripts/test_times.py` sums them per file.
TEST_WORKERS ?= 2
test-sqlite: install e2e-browser prometheus langgraph-venv ts-client
	$(PY) -m pytest -m "not cluster and not either_pass" -n $(TEST_WORKERS) --dist loadfile --junitxml=var/test-results/sqlite.xml

test-postgres: install prometheus pgbouncer langgraph-venv ts-client
	DATABASE_URL=$(TEST_POSTGRES_URL) REDIS_URL=$(TEST_REDIS_URL) REVIEWQUEUE_BACKEND_PASS=postgres \
		$(PY) -m pytest -m "postgres_variant or cluster or either_pass" -n $(TEST_WORKERS) --dist loadfile --junitxml=var/test-results/postgres.xml

# The LangGraph deployment tests run a real LangGraph Server (`langgraph dev`, in-memory runtime)
# from its own virtualenv: langgraph-cli's pins differ from ours. Under var/, outside the folder
# it serves (moderation/tests/langgraph_app), which it would otherwise watch and reload forever.
LANGGRAPH_VENV := var/langgraph-venv
LANGGRAPH_CLI := langgraph-cli[inmem]==0.4.40
$(LANGGRAPH_VENV)/.installed:
	$(PYTHON) -m venv $(LANGGRAPH_VENV)
	$(LANGGRAPH_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(LANGGRAPH_VENV)/bin/python -m pip install --quiet "$(LANGGRAPH_CLI)"
	@touch $@

langgraph-venv: $(LANGGRAPH_VENV)/.installed

# The e2e tests drive Chromium: Playwright's own where installed, else Debian's
# (installed here when running as root), or whichever E2E_CHROMIUM names.
e2e-browser: install e2e-axe
	@$(PY) e2e/browser.py 2>/dev/null || { \
	  if [ "$$(id -u)" = 0 ]; then \
	    echo "installing Debian's chromium for the e2e tests"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null && $(PY) e2e/browser.py; \
	  else \
	    echo "e2e: no Chromium found; install it (apt-get install -y chromium) or set E2E_CHROMIUM" >&2; exit 1; \
	  fi; }

# $(call apt_ensure,CHECK,PACKAGE,WHAT NEEDS IT,WHAT IS MISSING): unless the shell test CHECK passes, install
# Debian's PACKAGE (as root), or else stop saying how to.
define apt_ensure
@$(1) || { \
  if [ "$$(id -u)" = 0 ]; then \
    echo "installing Debian's $(2) for $(3)"; \
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $(2) >/dev/null; \
  else \
    echo "$(4) found; install it (apt-get install -y $(2))" >&2; exit 1; \
  fi; }
endef

# The metrics tests run a real Prometheus and promtool (Debian's, installed here when running as root).
prometheus:
	$(call apt_ensure,command -v prometheus >/dev/null && command -v promtool >/dev/null,prometheus,the metrics tests,metrics tests: no prometheus/promtool)

# The connection-budget cluster tests run the race through Debian's pgbouncer (session and transaction mode).
pgbouncer:
	$(call apt_ensure,command -v pgbouncer >/dev/null || [ -x /usr/sbin/pgbouncer ],pgbouncer,the connection-budget tests,cluster tests: no pgbouncer)

# The accessibility check (e2e/test_look.py) runs axe-core from npm inside the pages.
AXE_JS := var/npm/node_modules/axe-core/axe.min.js
e2e-axe: $(AXE_JS)
$(AXE_JS):
	npm install --no-save --prefix var/npm axe-core@4

# The TypeScript client's node_modules (its tests in e2e/test_typescript_client.py run `npm ci` too when these are stale).
TS_CLIENT := clients/typescript
ts-client: $(TS_CLIENT)/node_modules/.package-lock.json
$(TS_CLIENT)/node_modules/.package-lock.json: $(TS_CLIENT)/package-lock.json
	cd $(TS_CLIENT) && npm ci --no-audit --no-fund

e2e: install e2e-browser
	$(PY) -m pytest e2e

demo: install e2e-browser
	$(PY) e2e/demo.py --host $(HOST) --port $(DEMO_PORT) --rounds $(DEMO_ROUNDS) --wait $(DEMO_WAIT)

# Speed as ratios against the product's own floor, on SQLite and on PostgreSQL + Redis.
bench: install
	BENCH_POSTGRES_URL=$(TEST_POSTGRES_URL) BENCH_REDIS_URL=$(TEST_REDIS_URL) $(PY) -m bench.run

# The nemesis soak (docs/contributors/soak.md): two servers and two workers on PostgreSQL and a
# Redis of its own, SOAK_MINUTES of mixed load while faults strike at seeded random moments, then
# judged; the report goes to var/soak/ (soak.json, soak.svg). SOAK_SEED repeats a run's choices.
SOAK_MINUTES ?= 30
SOAK_SEED ?=
soak: install
	SOAK_MINUTES=$(SOAK_MINUTES) SOAK_SEED=$(SOAK_SEED) CLUSTER_POSTGRES_URL=$${CLUSTER_POSTGRES_URL:-$(TEST_POSTGRES_URL)} \
		$(PY) scripts/soak.py

clean:
	rm -rf $(VENV) var
