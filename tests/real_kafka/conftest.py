"""The real Apache Kafka cluster of the differential tests: started once per session, shared, stopped.

One controller and three brokers (epochguard.kafka.KafkaCluster), formatted with KIP-966's eligible
leader replicas off, as Kafka's own UncleanLeaderElectionTest runs (the ELR tests switch it on with
UpdateFeatures); they also listen on a client listener advertised at a wire proxy (`wire_proxy`, the
`kafka_proxy` fixture) that can hold clients' Fetches. Without Kafka's jars (`make kafka`) or Java 17 the tests skip naming what is missing,
except under CI=true, where they fail. The start time is printed in the terminal summary.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest

from epochguard.kafka import KafkaCluster, KafkaNotProvisioned, find_java, kafka_jars

from .wire_proxy import KafkaWireProxy

_START: dict[str, float] = {}
_PROXY: dict[str, KafkaWireProxy] = {}
DATA = Path(__file__).parents[1] / "data" / "kafka-4.4.0-unclean"


def under_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("true", "1")


def _require_kafka() -> None:
    try:
        kafka_jars()
        find_java()
    except KafkaNotProvisioned as e:
        if under_ci():
            pytest.fail(f"Apache Kafka: {e}", pytrace=False)
        pytest.skip(f"Apache Kafka: {e}")


def require_drivers(names: Iterable[str]) -> list[Any]:
    """The compat drivers (`epochguard.wire.drivers`) of the clients `names`, built if they need it; the test
    skips naming what is missing, except under CI=true, where it fails."""
    from epochguard.wire.drivers.compat import _unready
    from epochguard.wire.drivers.registry import client

    found = []
    for name in names:
        c = client(name)
        why = _unready(c)
        if why is not None:
            if under_ci():
                pytest.fail(f"{name}: {why}", pytrace=False)
            pytest.skip(f"{name}: {why}")
        found.append(c)
    return found


@pytest.fixture(scope="session")
def kafka_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    _require_kafka()
    # under target/ (not pytest's rotating tmp dirs), so the brokers' logs are still there after a failure
    from .wire_proxy import start_proxied_cluster

    base = Path(__file__).parents[2] / "target" / "real-kafka" / "cluster"
    shutil.rmtree(base, ignore_errors=True)
    t0 = time.monotonic()
    cluster, proxy = start_proxied_cluster(base, brokers=3, elr=False)
    _START["start_s"] = time.monotonic() - t0
    _PROXY["proxy"] = proxy
    try:
        yield cluster
    finally:
        t1 = time.monotonic()
        try:
            cluster.close()
        finally:
            proxy.close()
            _PROXY.clear()
        _START["stop_s"] = time.monotonic() - t1


@pytest.fixture(scope="session")
def kafka_proxy(kafka_cluster: KafkaCluster) -> KafkaWireProxy:
    """The wire proxy in front of the shared cluster's brokers (`wire_proxy`): a client bootstrapping at
    its `bootstrap` talks to the brokers through it, and a test can hold its Fetches."""
    return _PROXY["proxy"]


@pytest.fixture(scope="session")
def kafka_runs(kafka_cluster: KafkaCluster, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Scripts 2 and 3 run once on the real cluster, watched by a consumer, with log-dir copies before
    and after the old leader truncates: {script: (run, out dir, ground truth)}."""
    from .differential import KafkaBackend
    from .real_logs import AuditWatch, ground_truth
    from .test_differential import run_unclean_script

    runs: dict[str, Any] = {}
    for script, empty in (("script2", False), ("script3", True)):
        topic = f"diff-{script}"
        out = tmp_path_factory.mktemp(f"kafka-{script}")
        backend = KafkaBackend(kafka_cluster, topic, [1, 2])
        watch = AuditWatch(kafka_cluster, topic, out)
        try:
            t0 = time.monotonic()
            run = run_unclean_script(backend, empty_follower=empty, observer=watch)
            _START[f"{script}_s"] = time.monotonic() - t0
        finally:
            watch.close()
            backend.close()
        runs[script] = (run, out, ground_truth(out, topic, run))
        if os.environ.get("EPOCHGUARD_REFRESH_KAFKA_DATA"):  # the audit tests' checked-in copy (tests/spark)
            dest = DATA / script
            shutil.rmtree(dest, ignore_errors=True)
            shutil.copytree(out, dest)
    return runs


@pytest.fixture(scope="session")
def kafka_script(kafka_cluster: KafkaCluster) -> Any:
    """Runs a differential script once per session on the real cluster: `kafka_script(name)` -> its run
    (scripts 1, 4 and 5; scripts 2 and 3 are `kafka_runs`, watched for the audit)."""
    from .differential import KafkaBackend
    from .test_differential import SCRIPTS

    done: dict[str, Any] = {}

    def run(name: str) -> Any:
        if name not in done:
            script, assignment, _ = SCRIPTS[name]
            backend = KafkaBackend(kafka_cluster, f"diff-{name}", assignment)
            try:
                t0 = time.monotonic()
                done[name] = script(backend)
                _START[f"{name}_s"] = time.monotonic() - t0
            finally:
                backend.close()
        return done[name]
    return run


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if "start_s" in _START:
        terminalreporter.write_line(f"kafka: cluster (1 controller + 3 brokers) started in {_START['start_s']:.1f} s, "
                                    f"stopped in {_START.get('stop_s', float('nan')):.1f} s; "
                                    + ", ".join(f"{k[:-2]} ran in {v:.1f} s" for k, v in _START.items()
                                                if k.startswith("script")))
