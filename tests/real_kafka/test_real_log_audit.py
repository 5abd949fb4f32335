"""The audit on log dirs real Kafka brokers wrote, right after they wrote them.

After scripts 2 and 3 (tests/real_kafka/test_differential.py) the three brokers' log dirs were copied
before and after the old leader truncated, while a confluent-kafka consumer read the partition. The
audit (`epochguard.spark.auditing`, what `epochguard audit` runs; in-process, on the suite's shared Spark
session) must find exactly the divergence point, the lost records and the phantom reads the test
computed from the producer's acks and the final logs (`real_logs.ground_truth`). The same check runs
on the checked-in copy in tests/spark/test_audit_real_kafka.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from .real_logs import check_audit

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.no_mutants]

EXPECTED = {  # what the scripts make happen, stated independently of the computed truth
    "script2": {"divergence_offset": 5, "lost_offsets": [5, 6, 7], "phantom_offsets": [5, 6, 7]},
    "script3": {"divergence_offset": 0, "lost_offsets": [0, 1, 2], "phantom_offsets": [0, 1, 2]},
}


# Two of the four (script, phase) sets: Spark audits cost seconds each; the checked-in copy runs all four.
@pytest.mark.parametrize(("script", "phase"), [("script2", "before"), ("script3", "after")])
def test_audit_on_real_log_dirs(spark: Any, kafka_runs: dict[str, Any], script: str, phase: str,
                                tmp_path: Path) -> None:
    from epochguard.spark import audit

    _run, out, truth = kafka_runs[script]
    assert {k: truth[k] for k in EXPECTED[script]} == EXPECTED[script], truth
    dirs = [str(out / phase / f"broker-{b}") for b in (1, 2, 3)]
    result = audit(spark, dirs, consumed=str(out / "consumed.csv"), out=str(tmp_path / "audit"), html=False)
    assert result.error_count == 0
    problems = check_audit(tmp_path / "audit", truth, phase)
    assert not problems, "\n".join(problems)
