"""The audit on log dirs Apache Kafka 4.4.0 itself wrote (tests/data/kafka-4.4.0-unclean/), so this runs
where Kafka cannot start.

The data set is what tests/real_kafka recorded for scripts 2 and 3 on a real cluster (ELR off): the
three brokers' log dirs (the script's topic and the root checkpoints) before and after the old leader
truncated, a confluent-kafka consumer's reads (`consumed.csv`) and the ground truth the test computed
from the producer's acks and the final logs (`truth.json`). Refresh it with
`EPOCHGUARD_REFRESH_KAFKA_DATA=1 pytest tests/real_kafka`.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from real_kafka.real_logs import check_audit

from epochguard.spark import audit

DATA = Path(__file__).parents[1] / "data" / "kafka-4.4.0-unclean"


@pytest.mark.parametrize("phase", ["before", "after"])
@pytest.mark.parametrize("script", ["script2", "script3"])
def test_audit_on_log_dirs_real_kafka_wrote(spark: SparkSession, script: str, phase: str, tmp_path: Path) -> None:
    root = DATA / script
    truth = json.loads((root / "truth.json").read_text())
    dirs = sorted(str(p) for p in (root / phase).iterdir())
    assert len(dirs) == 3
    result = audit(spark, dirs, consumed=str(root / "consumed.csv"), out=str(tmp_path / "audit"), html=False)
    assert result.error_count == 0
    problems = check_audit(tmp_path / "audit", truth, phase)
    assert not problems, "\n".join(problems)
