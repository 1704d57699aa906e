# launchlab — `make help` lists the targets.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
TEST_WORKERS ?= 5

.DEFAULT_GOAL := help
.PHONY: help setup demo lab test check docs bench lint check-notebooks check-fixtures examples clean

# The tests run on every core in parallel (pytest-xdist; tests/conftest.py keeps the tests that share a fixture on
# one worker) and list their 15 slowest. Python may cache bytecode while they run, whatever the caller's
# PYTHONDONTWRITEBYTECODE says: without it pytest rewrites every test module's asserts again in each worker.
PYTEST := env -u PYTHONDONTWRITEBYTECODE $(BIN)/python -m pytest -q --dist loadgroup

help:  ## list the targets
	@grep -E '^[a-z-]+:.*##' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-16s %s\n", $$1, $$2}'

# uv resolves the same versions from the same registry as pip (the same 144 packages here) in 17 s against pip's 44,
# bytecode compiled as pip does; it does not read pip's configuration, so where only pip's index is reachable, pip
# installs instead. The installer's lines (144 packages, one by one) go to .venv/install.log, not before the demo's
# first line: make says what it installs in one line, and prints the log's tail where the install fails.
$(STAMP): pyproject.toml jupyter/ipython_kernel_config.py
	@echo "== creating $(VENV) with $(PYTHON)"
	$(PYTHON) -m venv $(VENV)
	@echo "== upgrading pip, and uv"
	$(BIN)/pip install --quiet --upgrade pip uv
	@echo "== installing launchlab and its tools into $(VENV) (under half a minute; pip takes a minute or two where uv fails)"
	@$(BIN)/uv pip install --python $(BIN)/python --compile-bytecode -e '.[dev]' > $(VENV)/install.log 2>&1 || $(BIN)/pip install --progress-bar off -e '.[dev]' >> $(VENV)/install.log 2>&1 || { tail -n 30 $(VENV)/install.log; echo "== the install failed: $(VENV)/install.log says why"; exit 1; }
	@echo "== the notebooks' kernel told not to announce its loopback TCP on every start (jupyter/ipython_kernel_config.py)"
	install -D -m 0644 jupyter/ipython_kernel_config.py $(VENV)/etc/ipython/ipython_kernel_config.py
	touch $(STAMP)
	@echo "== $(VENV) is ready: $$($(BIN)/python -m pip list --format freeze 2>/dev/null | wc -l) packages (each in $(VENV)/install.log)"

setup: $(STAMP)  ## create .venv with the project and its tools

demo: $(STAMP)  ## run the embedded default experiment (simulated 8-GPU host) and print where the report is
	@$(BIN)/launchlab run params/demo.yaml > /dev/null  # progress and "report: …/summary.html" go to stderr

lab: $(STAMP)  ## JupyterLab at the repository root: notebooks/, params/, outputs/ (a template saved loses its outputs)
	$(BIN)/jupyter lab --notebook-dir=. --config=jupyter/jupyter_server_config.py \
	  $(if $(filter 0,$(shell id -u)),--allow-root)

test: $(STAMP) check-notebooks lint docs  ## run the test suite (and ruff, and the notebook check): about 9 minutes on a quiet 2-core machine, more on a slower one
	$(PYTEST) -n $(TEST_WORKERS) --durations=15

check: $(STAMP) check-notebooks lint docs  ## the inner loop: ruff and the tests that start no real process (under a minute)
	$(PYTEST) -n 2 -m "not slow"

bench: $(STAMP)  ## benchmarks: parsing vs grep -E (200 MB; a 500 MB line, 2 GB logs), a process's import cost, the kit's cost per run, report at scale, a threshold search's launches guided vs blind
	$(BIN)/python bench/parse_vs_grep.py
	@# each bench exits 1 when it misses its target; the others still run, and make fails at the end
	@status=0; for b in parse_huge import_cost run_overhead report_scale search_launches; do $(BIN)/python bench/$$b.py || status=1; done; exit $$status

docs: $(STAMP)  ## the documentation site into site/ (open site/index.html; offline), strict: a broken link or anchor fails
	@# Material prints a notice of its successor at every build: read once, it is noise in every `make check`.
	@# Not --quiet: MkDocs 1.6 then stops counting warnings, and --strict passes a broken link.
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

examples: $(STAMP)  ## re-render every committed example (examples/*/<run dir>) with this kit: frames, verdict, report.md, summary.html
	@status=0; for d in examples/*/2*/; do echo "== $$d"; $(BIN)/launchlab report "$$d" > /dev/null || status=1; done; exit $$status

lint: $(STAMP)  ## ruff
	$(BIN)/ruff check lib tests bench

check-notebooks: $(STAMP)  ## committed notebooks must carry no outputs
	$(BIN)/python -m launchlab.nbcheck notebooks

# the captures the copies in tests/fixtures/real-logs were made from live in the project's shared data folder, beside
# the checkout (../shared/data); a clone without it has nothing to compare
check-fixtures:  ## the real logs the tests read are still byte for byte the captures they were copied from
	cd ../shared/data/real-logs && sha256sum --quiet -c $(CURDIR)/tests/fixtures/real-logs/SHA256SUMS

clean:  ## remove the environment and caches (keeps outputs/)
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis site
