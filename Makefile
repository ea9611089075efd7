# The two commands of the README: `make demo` (set up + grade the examples) and `make test`
# (set up everything the tests need + run them). Every target is safe to run again.
VENV := .venv
BIN := $(VENV)/bin

.PHONY: setup demo services docker-sandbox server-image lint test bench

setup:
	scripts/setup.sh

# The demo set's policy names a model (course-chat): the course model server answers for it.
DEMO_MODEL_PORT ?= 8400

demo: setup
	@$(BIN)/grader model serve --port $(DEMO_MODEL_PORT) & model=$$!; \
	trap 'kill $$model' EXIT; \
	for try in $$(seq 100); do \
		$(BIN)/python -c 'import sys, urllib.request as u; u.urlopen(sys.argv[1], timeout=1)' \
			http://127.0.0.1:$(DEMO_MODEL_PORT)/v1/models 2>/dev/null && break; sleep 0.2; \
	done; \
	for agent in reference llm_reference refuse_all cite_all; do \
		echo "== submissions/examples/$$agent"; \
		$(BIN)/grader grade submissions/examples/$$agent --cases private_cases --sandbox bwrap \
			--model-upstream http://127.0.0.1:$(DEMO_MODEL_PORT)/v1 || exit 1; \
		echo; \
	done

services:
	scripts/services.sh

docker-sandbox: setup
	scripts/docker-engine.sh
	scripts/build-base-image.sh -q

# The grader's own image for deploy/compose.yaml (also built by tests/server/test_deploy.py).
server-image: setup
	scripts/build-server-image.sh

lint: setup
	$(BIN)/ruff check grader tests benchmarks
	$(BIN)/ruff format --check grader tests benchmarks
	$(BIN)/mypy
	$(BIN)/lint-imports
	$(BIN)/pytest -q -p no:cacheprovider tests/test_imports.py

test: setup services docker-sandbox lint
	$(BIN)/pytest -p no:cacheprovider

# The load benchmark (benchmarks/bench_server_load.py) starts its own server; run it alone.
bench: setup
	$(BIN)/python benchmarks/bench_grade_overhead.py
	$(BIN)/python benchmarks/bench_docker_sandbox.py
	$(BIN)/python benchmarks/bench_leak_check.py
	$(BIN)/python benchmarks/bench_regrade.py
	$(BIN)/python benchmarks/bench_gates.py
	$(BIN)/python benchmarks/bench_audit.py
	$(BIN)/python benchmarks/bench_compare.py
