"""The drivers on the clean path, against librdkafka's built-in mock cluster (tests/wire/mock_cluster.py).

The mock is a real Kafka endpoint but cannot hold divergent replicas, so this checks only what a clean
run must show: every client consumed `events` contiguously from the start, every record matching the
final log, with no divergence, and every acks=all record it produced is in the final log exactly once.
kafka-python 3 is not run here: it probes ApiVersions v4/v3 and cannot decode the mock's fallback
answer (the mock serves ApiVersions 0-2), so it never connects; it is covered against `epochguard serve`.
Neither are the Java client and franz-go and sarama, for the same reason: kafka-clients 4.4.0 throttles
its connections for minutes after the failed handshake, franz-go logs "unable to read ApiVersions
response: response did not contain enough data", sarama falls back to ApiVersions v0 but then fails to
decode the mock's Metadata answer. kafka-go (ApiVersions v0) connects and is run.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from epochguard.wire.drivers.registry import CLIENTS, client
from epochguard.wire.drivers.session import RunResult, run_clients
from tests.wire.conftest import require, require_final_reader, usable

MOCK = Path(__file__).with_name("mock_cluster.py")
# epochguard's own client runs: the mock's refusal of ApiVersions v3 lists no range, and the handshake then
# retries at v0 as Java's NetworkClient does (it gave up there before, and never got its first metadata).
ON_MOCK = [c for c in CLIENTS if c.name not in ("kafka-python", "java-classic", "java-consumer", "franz-go", "sarama")]


@pytest.fixture(scope="module")
def mock_run(tmp_path_factory: pytest.TempPathFactory) -> RunResult:
    require_final_reader()
    available = [c for c in ON_MOCK if usable(c)]
    return run_clients([sys.executable, str(MOCK)], available, tmp_path_factory.mktemp("mock"), after_settle_s=4.0)


@pytest.mark.parametrize("name", [c.name for c in ON_MOCK])
def test_clean_run_loses_and_duplicates_nothing(mock_run: RunResult, name: str) -> None:
    require(client(name))
    truth = mock_run.truths[name]
    assert truth.client_id == f"epochguard-{name}"
    assert truth.consumed > 100, f"{name} consumed only {truth.consumed} records"
    assert truth.divergences == [], f"{name}: phantoms on a clean cluster: {truth.divergences[:3]}"
    assert truth.reread == 0 and truth.skipped == 0
    assert truth.produced_acked > 20, f"{name} had only {truth.produced_acked} acks=all records acknowledged"
    assert truth.lost_acked == [] and truth.duplicated_produced == []
    # it read every partition of `events` from the log start
    firsts = {}
    for entry in _consumed(mock_run.logs[name]):
        firsts.setdefault(entry["partition"], entry["offset"])
    assert firsts and set(firsts.values()) == {0}
    assert set(firsts) == {p for (t, p) in mock_run.final.partitions if t == "events"}


def _consumed(path: Path) -> list[dict]:
    from epochguard.wire.drivers.delivery_log import read_log

    return [e for e in read_log(path) if e["kind"] == "consumed"]
