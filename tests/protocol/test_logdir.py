"""A broker log dir written and read back: meta.properties, root checkpoints, partition dirs."""

from __future__ import annotations

import uuid

import pytest
from protocol_support import recs

from epochguard._core import iter_batches
from epochguard.storage.log import PartitionLog
from epochguard.storage.logdir import (
    kafka_uuid,
    read_log_dir,
    read_meta_properties,
    read_offset_checkpoint,
    write_log_dir,
    write_offset_checkpoint,
)
from epochguard.types import TopicPartition


def _logs():
    a = PartitionLog(TopicPartition("orders", 0), segment_bytes=150)
    for epoch in (0, 0, 2, 2):
        a.append_as_leader(recs(2), epoch)
    a.update_high_watermark(6)
    b = PartitionLog(TopicPartition("my-topic", 3))
    b.append_as_leader(recs(1), 7)
    b.update_high_watermark(1)
    return a, b


def test_write_and_read_back(tmp_path):
    a, b = _logs()
    topic_id = str(uuid.UUID(int=42))
    root = write_log_dir(tmp_path / "broker-2", 2, [a, b], topic_ids={"orders": topic_id})
    props = read_meta_properties(root)
    assert props["version"] == "1" and props["node.id"] == "2" and props["broker.id"] == "2"
    assert len(props["cluster.id"]) == 22
    assert (root / "replication-offset-checkpoint").read_text() == "0\n2\nmy-topic 3 1\norders 0 6\n"
    assert (root / "orders-0" / "partition.metadata").read_text() == f"version: 0\ntopic_id: {kafka_uuid(topic_id)}\n"
    assert len(list((root / "orders-0").glob("*.log"))) > 1

    back = read_log_dir(root)
    assert back.node_id == 2 and back.topic_ids == {"orders": kafka_uuid(topic_id)}
    assert set(back.logs) == {a.tp, b.tp}
    for original in (a, b):
        got = back.logs[original.tp]
        assert (got.log_start_offset, got.high_watermark, got.log_end_offset) == (
            original.log_start_offset,
            original.high_watermark,
            original.log_end_offset,
        )
        assert got.leader_epoch_cache == original.leader_epoch_cache
        assert [(x.base_offset, x.partition_leader_epoch, x.crc) for x in iter_batches(got.read(0))] == [
            (x.base_offset, x.partition_leader_epoch, x.crc) for x in iter_batches(original.read(0))
        ]


def test_log_start_offset_checkpoint_is_honoured(tmp_path):
    a, _ = _logs()
    a.increment_log_start_offset(3)
    root = write_log_dir(tmp_path, 1, [a])
    back = read_log_dir(root).logs[a.tp]
    assert back.log_start_offset == 3
    assert back.leader_epoch_cache.entries() == a.leader_epoch_cache.entries()


def test_offset_checkpoint_format_and_errors(tmp_path):
    p = tmp_path / "cp"
    write_offset_checkpoint(p, {TopicPartition("t", 1): 5, TopicPartition("t", 0): 9})
    assert p.read_text() == "0\n2\nt 0 9\nt 1 5\n"
    assert read_offset_checkpoint(p) == {TopicPartition("t", 0): 9, TopicPartition("t", 1): 5}
    assert read_offset_checkpoint(tmp_path / "missing") == {}
    p.write_text("0\n2\nt 0 9\n")
    with pytest.raises(ValueError):
        read_offset_checkpoint(p)
    p.write_text("1\n0\n")
    with pytest.raises(ValueError):
        read_offset_checkpoint(p)


def test_read_needs_meta_properties(tmp_path):
    with pytest.raises(FileNotFoundError):
        read_log_dir(tmp_path)


def test_kafka_uuid_form():
    u = uuid.UUID("07bfc788-d3e0-490e-a8c4-6f5967a10394")
    assert kafka_uuid(u) == "B7_HiNPgSQ6oxG9ZZ6EDlA"
    assert kafka_uuid("B3_HiNPgSQ6oxG9ZZ6ED5A") == "B3_HiNPgSQ6oxG9ZZ6ED5A"


def test_broker_restart_recovers_logs_epochs_and_high_watermarks(tmp_path):
    from protocol_support import TP, state

    from epochguard.broker.replica_manager import ReplicaManager

    rm = ReplicaManager(4, log_dir=tmp_path, segment_bytes=200)
    rm.apply_partition_state(state(4, 3, isr=(4,), replicas=(4,)), 0)
    for i in range(5):
        rm.partitions[TP].append_records_to_leader(recs(2, f"r{i}-"), acks=1, min_insync_replicas=1, now_ms=10 * i)
    rm.checkpoint()
    before = rm.partitions[TP].log
    restarted = ReplicaManager.recover(tmp_path)
    assert restarted.broker_id == 4
    restarted.apply_partition_state(state(4, 4, isr=(4,), replicas=(4,)), 100)
    after = restarted.partitions[TP].log
    assert after.read(0) == before.read(0)
    assert after.high_watermark == 10
    assert after.leader_epoch_cache.entries() == [(3, 0), (4, 10)]  # the new epoch starts at the recovered LEO
