# The two commands a newcomer needs (see README): `make demo` and `make test`.
# Each sets up what a fresh machine lacks: a virtualenv, the Python dependencies, and the
# extension built in release mode (an editable install: Python edits are live, `make setup`
# rebuilds the Rust side).

VENV ?= .venv
PY := $(VENV)/bin/python
export VIRTUAL_ENV := $(abspath $(VENV))
export PATH := $(VIRTUAL_ENV)/bin:$(PATH)

.PHONY: setup kcat drivers jvm-reader wheel kafka spark-kafka demo test test-rust test-python bench bench-audit compat lint docs mutants mutants-changed mutants-tools

setup:
	@test -x $(PY) || python3 -m venv $(VENV)
	@$(PY) -m pip install --quiet --disable-pip-version-check 'maturin>=1.7,<2'
	@echo "setup: building the extension and installing the dev extra (log: $(VENV)/setup.log)"
	@maturin develop --release --extras dev > $(VENV)/setup.log 2>&1 || { cat $(VENV)/setup.log; exit 1; }
	@$(MAKE) --no-print-directory kcat
	@$(MAKE) --no-print-directory drivers
	@$(MAKE) --no-print-directory jvm-reader

# kcat (Debian/Ubuntu package; librdkafka 2.0.2 inside, the wire tests' pre-KIP-320 control). Tolerates a
# machine without apt or root: the wire tests then skip kcat, except under CI=true, where they fail.
kcat:
	@command -v kcat >/dev/null || { echo "setup: installing kcat (log: $(VENV)/kcat.log)"; \
	  { apt-get update && apt-get install -y kcat; } > $(VENV)/kcat.log 2>&1 || \
	  { sudo -n apt-get update && sudo -n apt-get install -y kcat; } >> $(VENV)/kcat.log 2>&1 || \
	  echo "setup: could not install kcat (see $(VENV)/kcat.log); its wire tests will skip"; }

# The Java and Go wire drivers (tools/drivers/): kafka-clients 4.4.0 from Maven Central (checked-in pom),
# Driver.java compiled once, the Go module built with `go build`; cached under ~/.cache/epochguard/drivers
# by the hash of their sources, so only a changed pin or source builds again (a fresh machine: ~1-2 min).
# A JDK and Maven come from apt when missing; Go >= 1.26 must be on PATH (Debian's golang-go is older).
# Without a toolchain the wire tests skip those clients, except under CI=true, where this fails.
drivers:
	@{ command -v javac >/dev/null && command -v mvn >/dev/null; } || { echo "setup: installing a JDK and Maven (log: $(VENV)/drivers.log)"; \
	  { apt-get update && apt-get install -y openjdk-17-jdk-headless maven; } > $(VENV)/drivers.log 2>&1 || \
	  { sudo -n apt-get update && sudo -n apt-get install -y openjdk-17-jdk-headless maven; } >> $(VENV)/drivers.log 2>&1 || \
	  echo "setup: could not install a JDK and Maven (see $(VENV)/drivers.log)"; }
	@$(PY) -m epochguard.wire.drivers.toolchain

# The JVM `kafka-log` reader (tools/kafka-log-reader, Maven, compiled against pyspark's own Spark jars) with the
# decoder's JNI library inside (cargo, feature `jvm`, its own target dir target/jvm); cached under
# ~/.cache/epochguard/kafka-log-reader by pyspark's version and the hash of its Java and Rust sources. Without
# mvn or cargo the JVM reader's tests skip (kafka-log stays the Python source), except under CI=true, where this fails.
jvm-reader:
	@$(PY) -m epochguard.spark.jvm

# Apache Kafka 4.4.0's broker jars from Maven Central (tools/kafka-broker/pom.xml), for the real-cluster tests
# (tests/real_kafka/; mvn comes with `drivers`). Cached in $(KAFKA_JARS), keyed by the pom's hash (the same path
# epochguard.kafka.provision computes); `.complete` marks a finished copy. Tolerant like kcat: without mvn
# or Central the real-cluster tests skip naming what is missing, except under CI=true, where they fail.
EPOCHGUARD_CACHE ?= $(HOME)/.cache/epochguard
KAFKA_JARS = $(EPOCHGUARD_CACHE)/kafka-4.4.0-$(shell sha256sum tools/kafka-broker/pom.xml | cut -c1-12)
kafka:
	@test -f $(KAFKA_JARS)/.complete || { echo "setup: fetching Apache Kafka 4.4.0 jars into $(KAFKA_JARS) (log: $(VENV)/kafka.log)"; \
	  rm -rf $(KAFKA_JARS).tmp && mkdir -p $(KAFKA_JARS).tmp && \
	  mvn -B -q -f tools/kafka-broker/pom.xml dependency:copy-dependencies -DincludeScope=runtime \
	    -DoutputDirectory=$(KAFKA_JARS).tmp > $(VENV)/kafka.log 2>&1 && \
	  touch $(KAFKA_JARS).tmp/.complete && rm -rf $(KAFKA_JARS) && mv $(KAFKA_JARS).tmp $(KAFKA_JARS) || \
	  echo "setup: could not fetch Kafka's jars (see $(VENV)/kafka.log); the real-cluster tests will skip"; }

# Spark's own Kafka source (tools/spark-kafka/pom.xml: spark-sql-kafka-0-10 4.2.0, the newest Central serves,
# with kafka-clients 3.9.2 and commons-pool2), for the streaming-source comparison (tests/spark/test_stream_matrix.py).
# Only the connector's own jars: Spark, Hadoop and the compression libraries come with pyspark. Cached and tolerant
# like `kafka`.
SPARK_KAFKA_JARS = $(EPOCHGUARD_CACHE)/spark-kafka-$(shell sha256sum tools/spark-kafka/pom.xml | cut -c1-12)
spark-kafka:
	@test -f $(SPARK_KAFKA_JARS)/.complete || { echo "setup: fetching Spark's Kafka source into $(SPARK_KAFKA_JARS) (log: $(VENV)/spark-kafka.log)"; \
	  rm -rf $(SPARK_KAFKA_JARS).tmp && mkdir -p $(SPARK_KAFKA_JARS).tmp && \
	  mvn -B -q -f tools/spark-kafka/pom.xml dependency:copy-dependencies -DincludeScope=runtime \
	    -DincludeArtifactIds=spark-sql-kafka-0-10_2.13,spark-token-provider-kafka-0-10_2.13,kafka-clients,commons-pool2 \
	    -DoutputDirectory=$(SPARK_KAFKA_JARS).tmp > $(VENV)/spark-kafka.log 2>&1 && \
	  touch $(SPARK_KAFKA_JARS).tmp/.complete && rm -rf $(SPARK_KAFKA_JARS) && mv $(SPARK_KAFKA_JARS).tmp $(SPARK_KAFKA_JARS) || \
	  echo "setup: could not fetch Spark's Kafka source (see $(VENV)/spark-kafka.log); its comparison tests will skip"; }

# A wheel into $(DIST) carrying what a checkout has beside the package: the JVM kafka-log reader's jar
# (epochguard/spark/jars/), the wire drivers' sources (epochguard/wire/drivers/sources/) and Kafka's pom
# (epochguard/kafka/kafka-broker-pom.xml), built or fetched into the user's cache on first use. The staged
# copies are git-ignored. Run after `make setup`.
DIST ?= dist
wheel:
	$(PY) -m epochguard.spark.jvm --package
	rm -rf python/epochguard/wire/drivers/sources && mkdir -p python/epochguard/wire/drivers/sources/go
	cp -r tools/drivers/java python/epochguard/wire/drivers/sources/java
	cp tools/drivers/go/go.mod tools/drivers/go/go.sum tools/drivers/go/*.go python/epochguard/wire/drivers/sources/go/
	cp tools/kafka-broker/pom.xml python/epochguard/kafka/kafka-broker-pom.xml
	maturin build --release --out $(DIST)

demo: setup
	epochguard demo

test: setup kafka spark-kafka test-rust test-python

test-rust:
	cargo test --locked --features wire
	CARGO_TARGET_DIR=target/jvm cargo test --locked --lib --features jvm jvm::

test-python:
	$(PY) -m pytest

# The compatibility table of docs/serve.md and docs/compat.json: every installed client through every serve
# scenario and trigger (about an hour on 2 cores). `COMPAT_ARGS='--scenario NAME'` re-runs rows alone.
compat: setup
	$(PY) -m epochguard compat --docs docs $(COMPAT_ARGS)

bench: setup
	cargo bench --locked
	@mkdir -p target
	$(PY) -m pytest benches/python --benchmark-only --benchmark-group-by=group --benchmark-json=target/bench.json
	$(PY) benches/ratios.py target/bench.json --out target/ratios.json
	$(MAKE) bench-audit

# The audit with a large loss (issue 36): 3 and 12 M records, a sixth of each partition lost (2 M at 12 M),
# the driver's windows against the Spark path forced (`local_bytes=0`) in the same run; data cached in target/.
bench-audit: setup
	$(PY) benches/audit_scale.py --records 3000000,12000000 --tail-fraction 0.1666667 \
		--methods batches,batches:spark --json target/audit-scale.json

lint: setup
	$(PY) -m ruff check .
	cargo fmt --check
	cargo clippy --locked --all-targets --features python,wire -- -D warnings
	CARGO_TARGET_DIR=target/jvm cargo clippy --locked --lib --tests --features jvm -- -D warnings
	$(PY) -m mypy python/epochguard tools --ignore-missing-imports
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict --quiet

# The documentation site (docs/, mkdocs.yml) into target/site. --strict: a broken link, a page missing
# from the nav or an API reference that no longer resolves fails the build (and so `make lint`).
docs: setup
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict --quiet

# Mutation testing (docs/testing.md; not part of `make test` or .ci/run). Python: mutmut over
# the protocol modules with tests/protocol + tests/sim as the oracle; Rust: cargo-mutants over the epoch
# core and the record-batch decoder. `make mutants CHANGED=1` (or `make mutants-changed`) mutates only
# what changed since main. Results and survivors: target/mutants/ (survivors.md).
MUTANTS_FLAGS = $(if $(CHANGED),--changed --base $(or $(BASE),main))

mutants-tools: setup
	@$(PY) -c "import mutmut" 2>/dev/null || $(PY) -m pip install --quiet --disable-pip-version-check 'mutmut>=3.8,<4'
	@cargo mutants --version >/dev/null 2>&1 || cargo install cargo-mutants --locked

mutants: mutants-tools
	nice -n 15 $(PY) tools/mutants.py python $(MUTANTS_FLAGS)
	nice -n 15 $(PY) tools/mutants.py rust $(MUTANTS_FLAGS)
	$(PY) tools/mutants.py report

mutants-changed:
	$(MAKE) mutants CHANGED=1
