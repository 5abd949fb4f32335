"""The main job's inputs: an unclean leader election, as real broker log dirs plus the table of
records a consumer read, written under one output folder for `epochguard demo` to audit."""

from __future__ import annotations

import itertools
import shutil
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

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
    try:
        from epochguard.sim.scenarios import run_scenario
    except ImportError:  # the simulator is not installed: a scripted election instead
        return _scripted(out, logs)
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


def _scripted(out: Path, logs: Path) -> DemoInputs:
    """Broker 1 leads epoch 0 of every partition; its followers stop replicating, it keeps taking
    acks=1 writes that a consumer reads, then dies; broker 2 is elected uncleanly (epoch 1) and
    broker 3 follows it. Written with the core's encoder."""
    from epochguard import _core

    consumed: list[dict] = []
    for p in range(DEMO_PARTITIONS):
        replicated, unreplicated, rewritten = 30 + 5 * p, 12, 15
        common = [(0, o, f"order-{o}") for o in range(replicated)]
        old = common + [(0, o, f"order-{o}") for o in range(replicated, replicated + unreplicated)]
        new = common + [(1, o, f"refund-{o}") for o in range(replicated, replicated + rewritten)]
        for broker, held in ((1, old), (2, new), (3, new)):
            part = logs / f"broker-{broker}" / f"payments-{p}"
            part.mkdir(parents=True)
            (part.parent / "meta.properties").write_text(f"version=1\nnode.id={broker}\n")
            with open(part / f"{0:020d}.log", "wb") as f:
                for epoch, group in itertools.groupby(held, key=lambda r: r[0]):
                    run = list(group)
                    for i in range(0, len(run), 5):  # batches of 5 records
                        chunk = run[i : i + 5]
                        f.write(_core.encode_batch(
                            [(f"k{o}".encode(), v.encode()) for _, o, v in chunk],
                            base_offset=chunk[0][1],
                            partition_leader_epoch=epoch,
                            base_timestamp=1_700_000_000_000 + chunk[0][1],
                        ))
            cache = _core.LeaderEpochCache()
            for epoch, offset, _ in held:
                cache.assign(epoch, offset)
            cache.write_checkpoint(part / "leader-epoch-checkpoint")
        reads = old + [r for r in new if r[1] >= replicated + unreplicated]  # from broker 1, then from broker 2
        consumed += [
            {"topic": "payments", "partition": p, "offset": o, "leader_epoch": e, "key": f"k{o}".encode(),
             "value": v.encode(), "consumer": "app", "broker": 1 if e == 0 else 2}
            for e, o, v in reads
        ]
    path = out / "consumed.parquet"
    pq.write_table(pa.Table.from_pylist(consumed, schema=CONSUMED_SCHEMA), path)
    return DemoInputs(
        log_dirs=[str(logs / f"broker-{b}") for b in (1, 2, 3)],
        consumed=str(path),
        audit_out=str(out / "audit"),
        description=f"Scripted unclean election on {DEMO_PARTITIONS} partitions (simulator not installed); "
        f"log dirs: {logs}/broker-*, consumed records: {path}",
    )
