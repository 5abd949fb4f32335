"""`epochguard audit` (the command line, as a user runs it) on log dirs real Kafka brokers wrote.

After script 2 (tests/real_kafka/test_differential.py) the three brokers' log dirs were copied before
and after the old leader truncated, while a confluent-kafka consumer read the partition. The audit
must find exactly the divergence point, the lost records and the phantom reads the test computed
from the producer's acks and the final logs (`real_logs.ground_truth`).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from .real_logs import check_audit

pytestmark = [pytest.mark.kafka, pytest.mark.no_mutants]


@pytest.mark.parametrize("phase", ["before", "after"])
def test_audit_cli_on_real_log_dirs(kafka_runs: dict[str, Any], phase: str, tmp_path: Path) -> None:
    run, out, truth = kafka_runs["script2"]
    assert truth["divergence_offset"] == 5 and truth["lost_offsets"] == [5, 6, 7], truth
    assert truth["phantom_offsets"] == [5, 6, 7], truth  # the consumer read b-0..b-2 from the old leader
    dirs = [str(out / phase / f"broker-{b}") for b in (1, 2, 3)]
    audit_out = tmp_path / "audit"
    proc = subprocess.run([sys.executable, "-m", "epochguard", "audit", *dirs, "--consumed",
                           str(out / "consumed.csv"), "--out", str(audit_out), "--json"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 1, proc.stderr[-3000:]  # 1: divergence or phantom reads found
    summary = json.loads(proc.stdout)
    assert summary, proc.stdout
    problems = check_audit(audit_out, truth, phase)
    assert not problems, "\n".join(problems)
