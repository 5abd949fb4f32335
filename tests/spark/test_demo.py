"""`epochguard demo`: an unclean election written as real log dirs, then audited on local Spark."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq

from epochguard.__main__ import main


def test_demo_shows_the_records_the_election_lost(spark, tmp_path, capsys) -> None:
    out = tmp_path / "demo-out"
    assert main(["demo", "--out", str(out), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["exit_code"] == 1  # the audit found the loss the demo staged
    assert summary["lost_records"] > 0 and summary["diverged_replicas"] > 0
    assert sorted(p.name for p in (out / "logs").iterdir()) == [
        f"broker-{b}" for b in range(1, len(list((out / "logs").iterdir())) + 1)
    ]
    lost = pq.read_table(out / "audit" / "lost_records.parquet").to_pylist()
    assert len(lost) == summary["lost_records"]
    consumed = pq.read_table(out / "consumed.parquet").to_pylist()
    phantom = pq.read_table(out / "audit" / "phantom_reads.parquet").to_pylist()
    # every phantom read of a lost record is a record the consumer really read and a replica lost
    read = {(r["topic"], r["partition"], r["offset"], r["leader_epoch"]) for r in consumed}
    lost_keys = {(r["topic"], r["partition"], r["offset"], r["leader_epoch"]) for r in lost}
    losses = [r for r in phantom if r["kind"] in ("truncated", "rewritten")]
    assert all((r["topic"], r["partition"], r["offset"], r["leader_epoch"]) in read for r in phantom)
    assert all((r["topic"], r["partition"], r["offset"], r["leader_epoch"]) in lost_keys for r in losses)
    assert (out / "audit" / "report.html").read_text().count("<svg") >= 3
    assert Path(out / "audit" / "partitions.parquet").exists()
