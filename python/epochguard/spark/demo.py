"""The main job's inputs: an unclean leader election, as real broker log dirs plus the table of
records a consumer read, written under one output folder for `epochguard demo` to audit."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from epochguard.sim.scenarios import run_scenario

DEMO_PARTITIONS = 3
CONSUMED_SCHEMA = pa.schema(
    [
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("leader_epoch", pa.int32()),
        ("key", pa.binary()),
        ("value", pa.binary()),
        ("consumer", pa.string()),
        ("broker", pa.int32()),
    ]
)


@dataclass(frozen=True)
class DemoInputs:
    log_dirs: list[str]
    consumed: str
    audit_out: str
    description: str


def write_demo(out: str | Path, *, seed: int = 7) -> DemoInputs:
    """Run the simulator's `unclean-election` scenario on several partitions, write every broker's
    log dir under ``out/logs`` and the consumer's records as ``out/consumed.parquet``."""
    out = Path(out)
    logs = out / "logs"
    shutil.rmtree(logs, ignore_errors=True)
    result = run_scenario("unclean-election", seed=seed, partitions=DEMO_PARTITIONS, log_dir=logs)
    consumed = out / "consumed.parquet"
    rows = [
        {
            "topic": r.topic,
            "partition": r.partition,
            "offset": r.offset,
            "leader_epoch": r.leader_epoch,
            "key": r.key,
            "value": r.value,
            "consumer": r.consumer,
            "broker": r.broker,
        }
        for r in result.consumed
    ]
    pq.write_table(pa.Table.from_pylist(rows, schema=CONSUMED_SCHEMA), consumed)
    description = (
        f"Simulated '{result.scenario}' (seed {seed}): {len(result.log_dirs)} brokers, {DEMO_PARTITIONS} partitions, "
        f"{len(result.produced)} records acknowledged to the producer, {len(rows)} read by the consumer.\n"
        f"Broker log dirs: {logs}/broker-*; consumed records: {consumed}"
    )
    return DemoInputs(
        log_dirs=[str(p) for _, p in sorted(result.log_dirs.items())],
        consumed=str(consumed),
        audit_out=str(out / "audit"),
        description=description,
    )
