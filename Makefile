# The two commands a newcomer needs (see README): `make demo` and `make test`.
# Each sets up what a fresh machine lacks: a virtualenv, the Python dependencies, and the
# extension built in release mode (an editable install: Python edits are live, `make setup`
# rebuilds the Rust side).

VENV ?= .venv
PY := $(VENV)/bin/python
export VIRTUAL_ENV := $(abspath $(VENV))
export PATH := $(VIRTUAL_ENV)/bin:$(PATH)

.PHONY: setup demo test test-rust test-python bench lint

setup:
	@test -x $(PY) || python3 -m venv $(VENV)
	@$(PY) -m pip install --quiet --disable-pip-version-check 'maturin>=1.7,<2'
	@echo "setup: building the extension and installing the dev extra (log: $(VENV)/setup.log)"
	@maturin develop --release --extras dev > $(VENV)/setup.log 2>&1 || { cat $(VENV)/setup.log; exit 1; }

demo: setup
	epochguard demo

test: setup test-rust test-python

test-rust:
	cargo test --locked --features wire

test-python:
	$(PY) -m pytest

bench: setup
	cargo bench --locked
	$(PY) -m pytest benches/python --benchmark-only --benchmark-group-by=group

lint: setup
	cargo fmt --check
	cargo clippy --locked --all-targets --features python,wire -- -D warnings
	$(PY) -m mypy python/epochguard --ignore-missing-imports
