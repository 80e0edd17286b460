# leveled-ray: `make run` sets up and runs the demo; `make test` sets up and runs the tests.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: setup run test examples test-fast simulate mutate soak bench bench-compare lint typecheck wheel-check docs clean

setup: $(STAMP)

# The package is compiled once here, as pip compiles an installed wheel: else, where
# PYTHONDONTWRITEBYTECODE is set, every process (each Bookie's) compiles what it imports.
$(STAMP): setup.cfg pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e ".[test,spark]"
	$(BIN)/python -m compileall -q -j 0 -x '/(\.venv|build|data|site)/' .
	touch $(STAMP)

# The main job: local Ray and a file:// store under ./data (CI runs it with a smaller load).
DEMO_OBJECTS ?= 20000

run: setup
	$(BIN)/leveled-ray demo --url file://$(CURDIR)/data --objects $(DEMO_OBJECTS)

# PYTHONHASHSEED: the protocol simulation replays a seed exactly, across processes too.
test: setup
	PYTHONHASHSEED=0 $(BIN)/python -m pytest -m "not example"

# The guides' examples run as written, each in processes of its own that start their own
# clusters (Ray on Spark), the command line's verbs as processes, and Ray Client
# on a head of its own: about five minutes, so not in make test; CI runs both. (The other docs' examples run in make test: tests/docs.)
examples: setup
	PYTHONHASHSEED=0 $(BIN)/python -m pytest -m example

# The protocol simulation (tests/simulation): SEEDS seeds from FIRST, each checked against
# every invariant; a failing seed prints the command that replays it.
SEEDS ?= 1000
FIRST ?= 1
JOBS ?= 1
# A Config as JSON, for a test's fixed one (its failure prints it); default: each seed's own.
CONFIG ?=

simulate: setup
	PYTHONHASHSEED=0 $(BIN)/python tests/simulation/run.py --seeds $(SEEDS) --first $(FIRST) --jobs $(JOBS) --config '$(CONFIG)'

# Proof that the checks can fail: each mutant of tests/simulation/mutants.py against the
# simulation (up to SEEDS seeds) and its named tests; the report goes to build/mutants.md.
ONLY ?=

mutate: setup
	$(BIN)/python tests/simulation/mutate.py --seeds $(or $(MUTATE_SEEDS),200) --jobs $(JOBS) --only '$(ONLY)' --report build/mutants.md

# The fault campaigns at a size beyond make test's: GC passes under 5% S3 faults.
GC_PASSES ?= 200

soak: setup
	LR_GC_PASSES=$(GC_PASSES) PYTHONHASHSEED=0 $(BIN)/python -m pytest tests/admin/test_gc_campaign.py

# Everything but the moto S3 and slow groups.
test-fast: setup
	PYTHONHASHSEED=0 $(BIN)/python -m pytest -m "not s3 and not slow and not example"

# The quick benchmarks, each ratio against the last landed figures (bench/landed.json):
# names every one more than 20% worse. UPDATE=1 lands this run's figures.
bench-compare: setup
	$(BIN)/pip install --quiet -e ".[bench]"
	$(BIN)/python bench/compare.py $(if $(UPDATE),--update,)

bench: setup
	$(BIN)/pip install --quiet -e ".[bench]"
	$(BIN)/python bench/put_get.py
	$(BIN)/python bench/small_writes.py
	$(BIN)/python bench/shards.py
	$(BIN)/python bench/reads.py
	$(BIN)/python bench/restart_cache.py
	$(BIN)/python bench/history.py
	$(BIN)/python bench/elastic.py

lint: setup typecheck
	$(BIN)/pip install --quiet ruff import-linter
	$(BIN)/ruff check .
	$(BIN)/lint-imports

# The types a user's editor sees: the user scripts of tests/typing/ and the README's tour under
# mypy --strict. The package is found as leveled_ray in a copy of its files under build/types,
# and the scripts are checked from a directory of their own: run inside the clone, mypy takes
# the clone's directory (which holds __init__.py) for a package, and its name need not be a
# module's (/tmp/ci-check). The package's modules lend their types and are not checked.
typecheck: setup
	$(BIN)/pip install --quiet mypy
	rm -rf build/types && mkdir -p build/types/leveled_ray
	git ls-files -z -- '*.py' py.typed | xargs -0 tar -cf - | tar -xf - -C build/types/leveled_ray
	$(BIN)/python tests/support/readme_tour.py build/readme_tour.py
	scripts=$$(mktemp -d) && cp tests/typing/*.py build/readme_tour.py $$scripts/ && \
		cd $$scripts && MYPYPATH=$(CURDIR)/build/types $(CURDIR)/$(BIN)/mypy --strict \
		--follow-imports=silent --no-incremental *.py

# The package as a user installs it: sdist and wheel built, the wheel installed into a fresh
# venv, every module imported, the demo, the README's tour and the typed user scripts run or
# checked there.
wheel-check: setup
	bash .ci/wheel-check

# The documentation site (docs/, mkdocs.yml) under site/, its API reference read from the
# docstrings; --strict: a broken link or reference fails the build. mkdocstrings finds the
# package by its name, and the repository root is the package: build/api/leveled_ray points
# there.
docs: setup
	$(BIN)/pip install --quiet -e ".[docs]"
	mkdir -p build/api && ln -sfn ../.. build/api/leveled_ray
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet

clean:
	rm -rf $(VENV) data build site *.egg-info .pytest_cache .hypothesis
