"""The audit on hand-built replicas: a common prefix, then diverging epochs. Each partition of one
cluster is a different scenario, so one audit run checks them all record by record."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest

from epochguard.__main__ import main
from epochguard.spark import audit
from epochguard.spark.report import save

from .kafka_logs import Replica, records, write_log_dir

PREFIX = [(0, records("a", 0, 4)), (0, records("a", 4, 6))]  # offsets 0..9 in epoch 0, two batches


def cluster() -> dict[int, list[Replica]]:
    """Brokers 1-3. Broker 1 led epoch 0 and wrote offsets past what broker 2 replicated; broker 2
    was elected uncleanly (epoch 1 from offset 10); broker 3 follows broker 2."""
    return {
        1: [
            # unclean election: 10 records of epoch 0 past the divergence point, in a second segment
            Replica("orders", 0, [*PREFIX, (0, records("old", 10, 6)), (0, records("old", 16, 4))], segment_records=10),
            # same records everywhere
            Replica("clean", 0, [*PREFIX]),
            # retention: the reference deleted offsets 0..4; this replica still holds them
            Replica("retained", 0, [(0, records("a", 0, 5)), (0, records("a", 5, 5))]),
            # the topic was deleted and created again: other topic id
            Replica("recreated", 0, [(3, records("gen1", 0, 8))], topic_id="AAAAAAAAAAAAAAAAAAAAAA"),
            # no leader-epoch-checkpoint: the epochs are rebuilt from the records
            Replica("nockpt", 0, [*PREFIX, (1, records("old", 10, 3))], write_checkpoint=False),
        ],
        2: [
            Replica("orders", 0, [*PREFIX, (1, records("new", 10, 5)), (2, records("new", 15, 1))]),
            Replica("clean", 0, [*PREFIX]),
            Replica("retained", 0, [(0, records("a", 5, 5)), (0, records("a", 10, 2))], start_offset=5),
            Replica("recreated", 0, [(0, records("gen2", 0, 4))], topic_id="BBBBBBBBBBBBBBBBBBBBBB"),
            Replica("nockpt", 0, [*PREFIX, (2, records("new", 10, 2))]),
        ],
        3: [
            # behind: a prefix of broker 2's log (a lagging follower)
            Replica("orders", 0, [*PREFIX, (1, records("new", 10, 2))]),
            Replica("clean", 0, [*PREFIX]),
        ],
    }


@pytest.fixture(scope="module")
def scenario(tmp_path_factory: pytest.TempPathFactory) -> dict:
    root = tmp_path_factory.mktemp("cluster")
    replicas = cluster()
    dirs = {
        b: write_log_dir(
            root,
            b,
            rs,
            meta="node.id" if b == 3 else "broker.id",
            high_watermarks={("orders", 0): 12} if b == 1 else None,
        )
        for b, rs in replicas.items()
    }
    held = {(b, r.topic): r.records for b, rs in replicas.items() for r in rs}
    consumed = [
        *((o, e) for o, e, _, _ in held[(1, "orders")]),  # read from broker 1 before the election
        (15, 2),  # read from broker 2, the reference: not a phantom
        (17, 2),  # beyond the reference's log end in its latest epoch (logs copied before the read)
    ]
    rows = [("orders", 0, o, e) for o, e in consumed]
    rows += [("retained", 0, 2, 0), ("recreated", 0, 2, 4), ("ghost", 0, 0, 0), ("clean", 0, 3, 0)]
    rows += [("clean", 0, 4, None), ("orders", 0, 30, None)]  # reads without an epoch: matched by offset
    consumed_path = root / "consumed.parquet"
    table = pd.DataFrame(rows, columns=["topic", "partition", "offset", "leader_epoch"]).astype(
        {"leader_epoch": "Int32"}
    )
    table.to_parquet(consumed_path)
    return {"root": root, "dirs": dirs, "held": held, "consumed": consumed_path}


@pytest.fixture(scope="module")
def result(spark, scenario):
    return audit(
        spark,
        [str(d) for d in scenario["dirs"].values()],
        consumed=str(scenario["consumed"]),
        out=str(scenario["root"] / "out"),
    )


def _partitions(result) -> pd.DataFrame:
    df = pd.read_parquet(Path(result.out) / "partitions.parquet")
    return df.set_index(["topic", "broker"]).sort_index()


def test_reference_is_the_highest_epoch_then_the_longest_log(result) -> None:
    parts = _partitions(result)
    assert set(parts.loc["orders"]["reference_broker"]) == {2}
    assert parts.loc[("orders", 2), "reference_latest_epoch"] == 2
    assert parts.loc[("orders", 2), "reference_log_end_offset"] == 16
    assert set(parts.loc["clean"]["reference_broker"]) == {1}  # all equal: lowest broker id
    assert parts.loc[("orders", 2), "kind"] == "reference"


def test_unclean_election_divergence_and_lost_records_exactly(result, scenario) -> None:
    parts = _partitions(result)
    row = parts.loc[("orders", 1)]
    assert row["kind"] == "diverged"
    assert row["divergence_offset"] == 10
    assert (row["lost_count"], row["lost_first_offset"], row["lost_last_offset"]) == (10, 10, 19)
    assert row["epochs_confirmed"]
    assert row["high_watermark"] == 12 and row["lost_visible_count"] == 2  # offsets 10 and 11 were readable
    lost = pd.read_parquet(Path(result.out) / "lost_records.parquet").sort_values(["topic", "broker", "offset"])
    expected = [(o, e, k, v) for o, e, k, v in scenario["held"][(1, "orders")] if o >= 10]
    orders = lost[lost.topic == "orders"]
    assert list(zip(orders.offset, orders.leader_epoch, orders.key, orders.value, strict=True)) == expected
    assert set(orders.broker) == {1}
    # everything needed to re-publish: the headers and timestamps survive
    assert list(orders.headers.iloc[0]) == [{"key": "n", "value": b"10"}]
    assert orders.timestamp.iloc[0] == 1_700_000_000_010


def test_lagging_and_in_sync_replicas_lose_nothing(result) -> None:
    parts = _partitions(result)
    behind = parts.loc[("orders", 3)]
    assert behind["kind"] == "behind"
    assert pd.isna(behind["divergence_offset"]) and behind["lost_count"] == 0
    assert list(parts.loc["clean"]["kind"]) == ["reference", "in_sync", "in_sync"]
    assert parts.loc["clean"]["lost_count"].sum() == 0


def test_retention_is_not_loss(result) -> None:
    row = _partitions(result).loc[("retained", 1)]
    assert row["kind"] == "retention"
    assert row["retained_count"] == 5 and row["lost_count"] == 0
    assert row["reference_log_start_offset"] == 5


def test_recreated_topic_is_not_compared(result) -> None:
    parts = _partitions(result)
    # broker 1 holds the older incarnation with the higher epoch, so it is the reference
    assert parts.loc[("recreated", 1), "kind"] == "reference"
    assert parts.loc[("recreated", 2), "kind"] == "recreated"
    assert parts.loc[("recreated", 2), "lost_count"] == 0


def test_missing_checkpoint_rebuilds_epochs_from_records(result) -> None:
    parts = _partitions(result)
    row = parts.loc[("nockpt", 1)]
    assert row["epoch_source"] == "records"
    assert row["divergence_offset"] == 10 and row["lost_count"] == 3
    assert row["epochs_confirmed"]


def test_phantom_reads_are_classified(result) -> None:
    phantom = pq.read_table(Path(result.out) / "phantom_reads.parquet").to_pylist()
    kinds = {(r["topic"], r["offset"], r["leader_epoch"]): r["kind"] for r in phantom}
    # offsets 10..15 are now other records of epochs 1 and 2; 16..19 of epoch 0 never existed there
    assert {o: kinds[("orders", o, 0)] for o in range(10, 20)} == {
        o: "rewritten" if o < 16 else "truncated" for o in range(10, 20)
    }
    assert kinds[("orders", 17, 2)] == "beyond_log_end"
    assert kinds[("retained", 2, 0)] == "retention"
    assert kinds[("recreated", 2, 4)] == "recreated"  # an epoch the reference never had
    assert kinds[("ghost", 0, 0)] == "unknown_partition"
    assert ("orders", 15, 2) not in kinds and ("clean", 3, 0) not in kinds  # held by the reference
    assert ("clean", 4, None) not in kinds and kinds[("orders", 30, None)] == "beyond_log_end"
    assert {r["lost_on_broker"] for r in phantom if r["topic"] == "orders" and r["leader_epoch"] == 0} == {1}
    assert result.phantom_counts["rewritten"] == 6 and result.phantom_counts["truncated"] == 4


def test_exit_code_and_summary(result) -> None:
    assert result.exit_code == 1
    summary = json.loads(result.to_json())
    assert summary["lost_records"] == 10 + 3
    assert summary["diverged_replicas"] == 2
    html = (Path(result.out) / "report.html").read_text()
    assert html.count("<svg") == 5 and "diverges at 10" in html


def test_corrupt_segment_is_reported_and_the_audit_goes_on(spark, tmp_path) -> None:
    replicas = {b: [Replica("t", 0, [*PREFIX, (0, records("a", 10, 5))]), Replica("u", 0, [*PREFIX])] for b in (1, 2)}
    dirs = [write_log_dir(tmp_path, b, rs) for b, rs in replicas.items()]
    segment = dirs[0] / "t-0" / f"{0:020d}.log"
    data = bytearray(segment.read_bytes())
    second = 12 + int.from_bytes(data[8:12], "big")  # where the second batch starts
    data[second + 70] ^= 0xFF  # a record byte: the CRC no longer matches
    segment.write_bytes(bytes(data))
    checkpoint = dirs[1] / "u-0" / "leader-epoch-checkpoint"
    checkpoint.write_text("0\n2\n0 0\n")  # says two entries, holds one
    result = audit(spark, [str(d) for d in dirs], out=str(tmp_path / "out"))
    errors = pd.read_parquet(tmp_path / "out" / "errors.parquet").sort_values("broker")
    assert len(errors) == 2
    bad_checkpoint = errors.iloc[1]
    assert (bad_checkpoint.broker, bad_checkpoint.topic, bad_checkpoint.path) == (2, "u", str(checkpoint))
    assert pd.isna(bad_checkpoint.byte_position) and "line" in bad_checkpoint.reason
    error = errors.iloc[0]
    assert (error.broker, error.path, error.byte_position) == (1, str(segment), second)
    assert "crc" in error.reason.lower()
    parts = _partitions(result)
    # broker 1's records around the bad batch are read; what it held there is unreadable, not lost
    assert parts.loc[("t", 1), "record_count"] == 15 - 6
    assert (parts.loc[("t", 1), "kind"], parts.loc[("t", 1), "lost_count"]) == ("in_sync", 0)
    assert list(parts.loc["u"]["kind"]) == ["reference", "in_sync"]
    assert parts.loc[("u", 2), "epoch_source"] == "records"
    assert result.exit_code == 1


def test_cli_json_and_exit_codes(scenario, capsys, tmp_path) -> None:
    dirs = [str(d) for d in scenario["dirs"].values()]
    csv = tmp_path / "consumed.csv"
    pd.read_parquet(scenario["consumed"]).to_csv(csv, index=False)
    code = main(["audit", *dirs, "--out", str(tmp_path / "out"), "--consumed", str(csv), "--json"])
    summary = json.loads(capsys.readouterr().out)
    assert code == 1 and summary["exit_code"] == 1
    assert summary["phantom_reads"]["truncated"] == 4
    for b in (1, 2):  # a cluster of only the in-sync partition
        shutil.copytree(Path(scenario["dirs"][b]) / "clean-0", tmp_path / "clean" / f"broker-{b}" / "clean-0")
    code = main(
        ["audit", *(str(tmp_path / "clean" / f"broker-{b}") for b in (1, 2)), "--out", str(tmp_path / "o2"), "--json"]
    )
    assert code == 0 and json.loads(capsys.readouterr().out)["lost_records"] == 0
    assert main(["audit", str(tmp_path / "missing"), "--out", str(tmp_path / "o3")]) == 2


def test_hadoop_uris_audit_the_same(spark, scenario, result, tmp_path) -> None:
    uris = [Path(d).as_uri() for d in scenario["dirs"].values()]
    remote = audit(spark, uris, consumed=str(scenario["consumed"]), out=str(tmp_path / "out"))
    neutral = {"out": None, "provenance": None}  # where and when differ; what was found must not
    assert remote.summary() | neutral == result.summary() | neutral


def test_digest_mismatch_at_the_same_offset_and_epoch_is_reported(spark, tmp_path) -> None:
    """Same offsets, same epochs, other bytes: not 'in sync' (the old (offset, epoch) comparison
    would have said so) but a mismatched copy, record by record."""
    forged = [(0, records("a", 0, 4)), (0, records("b", 4, 6))]  # offsets 4..9: other values, same lengths
    dirs = [write_log_dir(tmp_path, 1, [Replica("m", 0, [*PREFIX])]), write_log_dir(tmp_path, 2, [Replica("m", 0, forged)])]
    result = audit(spark, [str(d) for d in dirs], out=str(tmp_path / "out"))
    parts = _partitions(result)
    assert parts.loc[("m", 1), "kind"] == "reference"
    row = parts.loc[("m", 2)]
    assert (row["kind"], row["mismatch_count"], row["lost_count"]) == ("mismatched", 6, 0)
    assert "forged" in row["reason"]
    mismatched = pd.read_parquet(tmp_path / "out" / "mismatched_records.parquet")
    assert list(mismatched.offset) == [4, 5, 6, 7, 8, 9] and set(mismatched.broker) == {2}
    assert (mismatched.record_digest != mismatched.reference_digest).all()
    assert (mismatched.value_length == mismatched.reference_value_length).all()
    assert result.exit_code == 1 and result.summary()["mismatched_records"] == 6


def test_result_is_data_first_and_names_its_inputs(spark, scenario, tmp_path) -> None:
    dirs = [str(d) for d in scenario["dirs"].values()]
    result = audit(spark, dirs, out=None)
    assert result.out is None and not (tmp_path / "saved").exists()
    assert result.lost_records.count() == result.lost_count == 13
    assert result.provenance["log_dirs"] == dirs and result.provenance["spark_master"] == "local[2]"
    save(result, str(tmp_path / "saved"))
    html = (tmp_path / "saved" / "report.html").read_text()
    assert all(d in html for d in dirs) and "local[2]" in html and result.provenance["epochguard_version"] in html
    assert pd.read_parquet(tmp_path / "saved" / "lost_records.parquet").shape[0] == 13


def test_lost_records_are_re_decoded_from_their_batch_alone(tmp_path) -> None:
    """The byte range of one batch is all the re-decode reads: the rest of the segment may be garbage."""
    import pyarrow as pa

    from epochguard import _core
    from epochguard.spark.logs import decode_ranges

    from .kafka_logs import kafka_python_batch

    batch = kafka_python_batch(records("x", 40, 3), 40, 7)
    segment = tmp_path / f"{0:020d}.log"
    segment.write_bytes(b"\xff" * 100 + batch + b"\x00" * 50)
    schema = pa.schema([("broker", pa.int32()), ("topic", pa.string()), ("offset", pa.int64()), ("value", pa.binary())])
    ranges = pa.RecordBatch.from_pylist(
        [{"broker": 3, "topic": "t", "path": str(segment), "batch_position": 100, "batch_size": len(batch),
          "content": None}],
        schema=pa.schema([("broker", pa.int32()), ("topic", pa.string()), ("path", pa.string()),
                          ("batch_position", pa.int64()), ("batch_size", pa.int32()), ("content", pa.binary())]),
    )
    out = pa.Table.from_batches(decode_ranges(iter([ranges]), schema=schema, columns=["offset", "value"], verify_crc=True))
    assert out.to_pylist() == [{"broker": 3, "topic": "t", "offset": 40 + i, "value": f"x-{40 + i}".encode()} for i in range(3)]
    with pytest.raises(_core.CorruptRecordError):
        _core.decode_arrow(str(segment))
