# The two commands of the README: `make run` (the main job) and `make test` (the test suite).
# Both create .venv and install the project into it on first use; later calls reuse it.
PY      ?= python3
VENV    := .venv
BIN     := $(VENV)/bin
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false
export NO_MKDOCS_2_WARNING := 1

$(BIN)/.installed: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test,docs]'
	touch $@

.PHONY: install run test docs docs-serve docs-screenshots bench bench-throughput bench-traces bench-probe bench-scale bench-sandbox bench-realism bench-clinsql bench-clinsql-tasks bench-ehragent-tasks bench-agentehr bench-physassist bench-physassist-sessions bench-rate-limits bench-scaleout clean
install: $(BIN)/.installed

run: install
	$(BIN)/python -m ehrbench $(ARGS)

test: install
	$(BIN)/python -m pytest -q $(ARGS)

docs: install
	$(BIN)/mkdocs build --strict

docs-serve: install
	$(BIN)/mkdocs serve --strict

docs-screenshots: install
	$(BIN)/python scripts/docs_screenshots.py $(ARGS)

bench: install
	$(BIN)/python bench/bench_world.py $(ARGS)

bench-scale: install
	$(BIN)/python bench/bench_world_scale.py $(ARGS)

bench-probe: install
	$(BIN)/python bench/probe_world.py $(ARGS)

bench-throughput: install
	$(BIN)/python bench/bench_throughput.py $(ARGS)

bench-sandbox: install
	$(BIN)/python bench/bench_sandbox.py $(ARGS)

bench-realism: install
	$(BIN)/python bench/bench_realism.py $(ARGS)

bench-traces: install
	$(BIN)/python bench/bench_traces.py $(ARGS)

bench-clinsql: install
	$(BIN)/python bench/bench_clinsql.py $(ARGS)

bench-clinsql-tasks: install
	$(BIN)/python bench/bench_clinsql_tasks.py $(ARGS)

bench-ehragent-tasks: install
	$(BIN)/python bench/bench_ehragent_tasks.py $(ARGS)

bench-agentehr: install
	$(BIN)/python bench/bench_agentehr.py $(ARGS)

bench-physassist: install
	$(BIN)/python bench/bench_physassist.py $(ARGS)

bench-physassist-sessions: install
	$(BIN)/python bench/bench_physassist_sessions.py $(ARGS)

bench-rate-limits: install
	$(BIN)/python bench/bench_rate_limits.py $(ARGS)

bench-scaleout: install
	$(BIN)/python bench/bench_scaleout.py $(ARGS)

clean:
	rm -rf $(VENV) data/generated mlruns/* .cache
