# launchlab — `make help` lists the targets.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.DEFAULT_GOAL := help
.PHONY: help setup demo lab test bench lint check-notebooks check-fixtures clean

help:  ## list the targets
	@grep -E '^[a-z-]+:.*##' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-16s %s\n", $$1, $$2}'

$(STAMP): pyproject.toml
	@echo "== creating $(VENV) with $(PYTHON)"
	$(PYTHON) -m venv $(VENV)
	@echo "== upgrading pip"
	$(BIN)/pip install --quiet --upgrade pip
	@echo "== installing launchlab and its tools into $(VENV) (a minute or two; pip lists each package)"
	$(BIN)/pip install --progress-bar off -e '.[dev]'
	touch $(STAMP)
	@echo "== $(VENV) is ready"

setup: $(STAMP)  ## create .venv with the project and its tools

demo: $(STAMP)  ## run the embedded default experiment (simulated 8-GPU host) and print where the report is
	@$(BIN)/launchlab run params/demo.yaml > /dev/null  # progress and "report: …/summary.html" go to stderr

lab: $(STAMP)  ## JupyterLab on notebooks/ (outputs stripped when a template is saved; --allow-root only as root)
	$(BIN)/jupyter lab --notebook-dir=notebooks --config=jupyter/jupyter_server_config.py \
	  $(if $(filter 0,$(shell id -u)),--allow-root)

test: $(STAMP) check-notebooks lint  ## run the test suite (and ruff, and the notebook check)
	$(BIN)/python -m pytest -q

bench: $(STAMP)  ## benchmarks: parsing vs grep -E (200 MB; a 500 MB line, 2 GB logs), the kit's cost per run, report at scale
	$(BIN)/python bench/parse_vs_grep.py
	@# each bench exits 1 when it misses its target; the others still run, and make fails at the end
	@status=0; for b in parse_huge run_overhead report_scale; do $(BIN)/python bench/$$b.py || status=1; done; exit $$status

lint: $(STAMP)  ## ruff
	$(BIN)/ruff check lib tests bench

check-notebooks: $(STAMP)  ## committed notebooks must carry no outputs
	$(BIN)/python -m launchlab.nbcheck notebooks

check-fixtures:  ## the fixture copies still match ../shared/data (where it is present) byte for byte
	cd ../shared/data/real-logs && sha256sum --quiet -c $(CURDIR)/tests/fixtures/real-logs/SHA256SUMS

clean:  ## remove the environment and caches (keeps outputs/)
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis
