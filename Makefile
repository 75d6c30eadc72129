.DEFAULT_GOAL := help
SHELL := /bin/bash

PYTHON ?= python3
PY_SOURCES := python tests benches examples
# Absolute interpreter path, for targets that change directory first.
PYTHON_EXE = $(shell $(PYTHON) -c 'import sys; print(sys.executable)')
WHEEL_DIR := dist/wheel-check
# Clippy and the Rust tests build apart from the extension (target/): neither waits for the
# other's lock, so CI builds them while pip builds the extension.
CHECKS_DIR := target/checks

.PHONY: help
help: ## list the targets
	@grep -hE '^[a-zA-Z_-]+:.*?## ' $(MAKEFILE_LIST) \
		| awk 'BEGIN {FS = ":.*?## "}; {printf "  %-14s %s\n", $$1, $$2}'

.PHONY: install
install: ## install pyrmq in editable mode with the dev tools and PySpark (builds the extension)
	$(PYTHON) -m pip install -e '.[dev,spark]'

.PHONY: proto
proto: ## regenerate the gRPC protocol's Python modules from python/pyrmq/proxy/proto/*.proto
	$(PYTHON) -m grpc_tools.protoc -I python/pyrmq/proxy/proto \
		--python_out=python/pyrmq/proxy/proto --pyi_out=python/pyrmq/proxy/proto \
		python/pyrmq/proxy/proto/messaging.proto

.PHONY: rmq5-client
rmq5-client: ## install the official RocketMQ 5 Python client into .venv-rmq5 (tests/compat drive it)
	@# Its own virtualenv: its package is also named rocketmq, as the 4.x client's is.
	test -x .venv-rmq5/bin/python || $(PYTHON) -m venv .venv-rmq5
	.venv-rmq5/bin/python -m pip install --quiet --disable-pip-version-check 'rocketmq-python-client==5.1.2'

.PHONY: build-dev
build-dev: ## rebuild the extension in debug mode into python/pyrmq
	$(PYTHON) -m maturin develop

.PHONY: build-release
build-release: ## build the release wheel into dist/
	$(PYTHON) -m maturin build --release -o dist

.PHONY: format
format: ## format Rust and Python code, fix import order
	cargo fmt --all
	$(PYTHON) -m ruff check --fix-only --exit-zero $(PY_SOURCES)
	$(PYTHON) -m ruff format $(PY_SOURCES)

.PHONY: lint
lint: ## check formatting and lints of Rust and Python code
	cargo fmt --all --check
	cargo clippy --workspace --all-targets --target-dir $(CHECKS_DIR) -- -D warnings
	$(PYTHON) -m ruff check $(PY_SOURCES)
	$(PYTHON) -m ruff format --check $(PY_SOURCES)

.PHONY: typecheck
typecheck: stubtest ## check the _core stubs (stubtest), then type-check python/pyrmq with mypy (strict)
	$(PYTHON) -m mypy

.PHONY: stubtest
stubtest: ## check python/pyrmq/_core.pyi against the built extension
	$(PYTHON) -m mypy.stubtest pyrmq._core --allowlist .mypy-stubtest-allowlist

.PHONY: test-rust
test-rust: ## run the Rust tests of every crate (store, remoting codec, binding)
	cargo test --workspace --profile test-opt --target-dir $(CHECKS_DIR)

.PHONY: rust-checks-build
rust-checks-build: ## build what clippy and the Rust tests need, without running the tests
	cargo clippy --workspace --all-targets --target-dir $(CHECKS_DIR) -- -D warnings
	cargo test --workspace --profile test-opt --target-dir $(CHECKS_DIR) --no-run

.PHONY: test-python
test-python: ## run the whole pytest suite (needs the built extension), naming its slowest tests
	$(PYTHON) -m pytest --durations=20

.PHONY: bench
bench: ## run the pytest-benchmark suites
	$(PYTHON) -m pytest benches/pytest --benchmark-only --benchmark-group-by=group $(BENCH_ARGS)

.PHONY: bench-smoke
bench-smoke: ## run every benchmark once, quickly, to keep them working
	$(PYTHON) benches/smoke.py

.PHONY: asv
asv: ## run the asv suites against the installed build (pass ASV_ARGS to change)
	cd benches/asv && $(PYTHON_EXE) -m asv machine --yes
	cd benches/asv && $(PYTHON_EXE) -m asv run --python=same --quick --show-stderr $(ASV_ARGS)

.PHONY: wheel-check
wheel-check: ## build the release wheel, install it into a fresh virtualenv and import it
	rm -rf $(WHEEL_DIR)
	$(PYTHON) -m maturin build --release -o $(WHEEL_DIR)
	@set -euo pipefail; \
	venv="$$(mktemp -d)/venv"; \
	trap 'rm -rf "$$(dirname "$$venv")"' EXIT; \
	$(PYTHON) -m venv "$$venv"; \
	"$$venv/bin/python" -m pip install --quiet --disable-pip-version-check $(WHEEL_DIR)/*.whl; \
	cd / && "$$venv/bin/python" -c 'import pyrmq, pyrmq._core; assert pyrmq._core.build_profile() == "release", pyrmq._core.build_profile(); print("wheel-check: imported pyrmq", pyrmq.__version__, "from", pyrmq.__file__)'; \
	"$$venv/bin/pyrmq" --version

.PHONY: test
test: lint typecheck test-rust test-python bench-smoke wheel-check ## everything CI runs

.PHONY: clean
clean: ## remove build output and caches
	cargo clean
	rm -rf dist .asv .benchmarks .hypothesis .pytest_cache .mypy_cache .ruff_cache
	find python -name '*.so' -delete
