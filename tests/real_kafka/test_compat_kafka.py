"""`compat --cluster kafka`'s runner on the session's real cluster: one scenario (unclean-election,
trigger served) with the Java client (classic), franz-go, kafka-go and epochguard's own client, judged
by their delivery logs against the final log. The full serve-vs-Kafka table is `epochguard compat
--cluster kafka` (docs/real-kafka.md); this keeps its runner honest in `make test`.

Expected as against serve (docs/serve.md): the KIP-320 clients (Java, franz-go, epochguard's) detect
the truncation of records they read; kafka-go, which never sends a leader epoch, goes on silently.
epochguard's client is the regression check of a bug only Kafka showed: after the 30-45 s without a
leader that Kafka's unclean election takes here, it read nothing more, no error surfaced (its own
ApiVersions request, without a software name, was INVALID_REQUEST on Kafka: fixed in db10033).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from epochguard.kafka import KafkaCluster
from epochguard.wire.drivers.kafka_runs import run_kafka
from epochguard.wire.drivers.registry import client

from .conftest import require_drivers

pytestmark = [pytest.mark.kafka, pytest.mark.no_mutants]

EXPECTED = {"java-classic": "detected", "franz-go": "detected", "kafka-go": "silent", "epochguard": "detected"}


def test_unclean_election_on_kafka_judged_by_delivery_logs(kafka_cluster: KafkaCluster, tmp_path: Path) -> None:
    clients = require_drivers(EXPECTED)
    result = run_kafka(kafka_cluster, "unclean-election", "served", clients, tmp_path, "compat-test")
    verdicts = {name: sorted({d.verdict for d in truth.divergences}) for name, truth in result.truths.items()}
    assert verdicts == {name: [v] for name, v in EXPECTED.items()}, f"{verdicts}\n" + "\n".join(
        f"{name}: {result.why(name)}" for name in EXPECTED)
    # the replaced records were acks=1 writes only broker 1 had; what the drivers produced (acks=all to an
    # ISR that shrank to [1], then elected uncleanly too) is the producers' business, not the verdict's
    assert all(t.consumed > 0 for t in result.truths.values())


def test_consecutive_unclean_on_kafka_is_out_of_kip_320s_sight(kafka_cluster: KafkaCluster, tmp_path: Path) -> None:
    """Two unclean elections in a row on Kafka 4.4 (`consecutive-unclean`): broker 2 is elected in a new
    epoch, the clients read its records, then broker 3, which never had that epoch and holds more of the
    first leader's epoch than broker 2 had. Kafka answers OffsetsForLeaderEpoch of the second epoch with the
    end of broker 3's first one, above the clients' positions, so the KIP-320 clients (librdkafka, epochguard's)
    find nothing and go on: the replaced records are `undetectable` in their delivery logs against the final
    log, as on serve; the first election is detected as any."""
    clients = [client("confluent-kafka"), client("epochguard")]
    result = run_kafka(kafka_cluster, "consecutive-unclean", "served", clients, tmp_path, "consecutive")
    for name, truth in result.truths.items():
        said = [(d.verdict, d.how) for d in truth.divergences]
        assert said == [("detected", "rewound"), ("undetectable", "continued")], f"{name}: {said}\n{result.why(name)}"
        undetectable = truth.divergences[1]
        # KIP-320's point, the end of the third leader's earlier epoch, lies above the first replaced record
        assert undetectable.epoch is not None and undetectable.located is not None
        assert undetectable.located > undetectable.offset and undetectable.skipped > 0
