"""The pure parsers of Kafka's log-dir files (`epochguard.storage.logdir_format`), against files a real
broker wrote (../shared/kafka-segments) and against Kafka's own rules for the rest."""

from __future__ import annotations

from pathlib import Path

import pytest

from epochguard.errors import MalformedFileError
from epochguard.storage.logdir_format import (
    MetaProperties,
    parse_leader_epoch_checkpoint,
    parse_meta_properties,
    parse_offset_checkpoint,
    parse_partition_metadata,
    segment_base_offset,
)
from epochguard.types import TopicPartition

LDI = Path("/work/shared/kafka-segments/ldi-poc")


@pytest.fixture
def ldi() -> Path:
    if not LDI.is_dir():
        pytest.skip("real segments (../shared/kafka-segments) not available")
    return LDI


def test_real_partition_metadata_and_epoch_checkpoints(ldi: Path) -> None:
    path = ldi / "TestTopicPatient-0" / "partition.metadata"
    assert parse_partition_metadata(path.read_bytes(), str(path)) == "B3_HiNPgSQ6oxG9ZZ6ED5A"
    epochs = {
        p.parent.name: parse_leader_epoch_checkpoint(p.read_bytes(), str(p)) for p in ldi.glob("*/leader-epoch-checkpoint")
    }
    assert epochs == {"TestTopicPatient-0": [(0, 0)], "__cluster_metadata-0": [(1, 0)], "__consumer_offsets-6": [(0, 0)]}


def test_real_segment_names(ldi: Path) -> None:
    names = {p.name: segment_base_offset(p.name) for p in (ldi / "__consumer_offsets-6").iterdir()}
    assert names == {
        "00000000000000000000.log": 0,
        "00000000000000000000.index": None,
        "00000000000000000000.timeindex": None,
        "00000000000000000013.snapshot": None,
        "leader-epoch-checkpoint": None,
    }
    assert segment_base_offset("00000000000000001234.log") == 1234
    assert segment_base_offset("foo.log") is None
    assert segment_base_offset("0000000000000001234.log") is None  # 19 digits
    assert segment_base_offset("00000000000000001234.log.deleted") is None


# What Kafka 3.x writes (`MetaPropertiesEnsemble` via java.util.Properties.store: a date comment).
KRAFT = b"#\n#Mon Jan 01 00:00:00 UTC 2024\nnode.id=3\ndirectory.id=zm8J-5BqQ6mFw6yQmu0q5A\nversion=1\ncluster.id=MkU3OEVBNTcwNTJENDM2Qg\n"
ZK = b"#\n#Mon Jan 01 00:00:00 UTC 2024\nbroker.id=7\nversion=0\ncluster.id=abc\n"


def test_meta_properties_follow_kafkas_version_rules() -> None:
    assert parse_meta_properties(KRAFT) == MetaProperties(1, 3, "MkU3OEVBNTcwNTJENDM2Qg", "zm8J-5BqQ6mFw6yQmu0q5A")
    assert parse_meta_properties(ZK) == MetaProperties(0, 7, "abc", None)
    # the version decides which key names the broker; the other one is ignored
    assert parse_meta_properties(b"version=1\nnode.id=4\nbroker.id=9\ncluster.id=c\n").node_id == 4
    assert parse_meta_properties(b"version=0\nnode.id=4\nbroker.id=9\n").node_id == 9
    assert parse_meta_properties(b"broker.id=9\n").node_id == 9  # no version: 0
    assert parse_meta_properties(b"node.id=4\n").node_id is None  # version 0 has no node.id
    assert parse_meta_properties(b"broker.id : 5\n").node_id == 5  # java.util.Properties ':' separator


@pytest.mark.parametrize(
    ("data", "line", "match"),
    [
        (b"version=1\ncluster.id=c\n", 0, "node.id"),
        (b"version=1\nnode.id=1\n", 0, "cluster.id"),
        (b"#c\nversion=2\n", 2, "version 2"),
        (b"version=0\nbroker.id=x7\n", 2, "not an integer"),
        (b"version=0\njunk\n", 2, "key=value"),
        (b"broker.id=1\n\xff\n", 2, "UTF-8"),
    ],
)
def test_malformed_meta_properties_name_file_and_line(data: bytes, line: int, match: str) -> None:
    with pytest.raises(MalformedFileError, match=match) as info:
        parse_meta_properties(data, "/d/meta.properties")
    assert (info.value.path, info.value.line) == ("/d/meta.properties", line)
    assert isinstance(info.value, ValueError)


def test_offset_checkpoints() -> None:
    data = b"0\n2\nt 0 9\nmy-topic 3 1\n"
    assert parse_offset_checkpoint(data, "cp") == {TopicPartition("t", 0): 9, TopicPartition("my-topic", 3): 1}
    assert parse_offset_checkpoint(b"", "cp") == {}


@pytest.mark.parametrize(
    ("data", "line", "match"),
    [
        (b"1\n0\n", 1, "version"),
        (b"0\n", 2, "count"),
        (b"0\nx\n", 2, "not an integer"),
        (b"0\n2\nt 0 9\n", 2, "expected 2 entries, found 1"),
        (b"0\n1\nt 0\n", 3, "<topic> <partition> <offset>"),
        (b"0\n2\nt 0 9\nt one 9\n", 4, "partition"),
    ],
)
def test_malformed_offset_checkpoints_name_file_and_line(data: bytes, line: int, match: str) -> None:
    with pytest.raises(MalformedFileError, match=match) as info:
        parse_offset_checkpoint(data, "/d/replication-offset-checkpoint")
    assert (info.value.path, info.value.line) == ("/d/replication-offset-checkpoint", line)


@pytest.mark.parametrize(
    ("data", "line"),
    [(b"version: 1\ntopic_id: x\n", 1), (b"version: 0\n", 2), (b"topic_id: x\nversion: 0\n", 1), (b"", 1)],
)
def test_malformed_partition_metadata(data: bytes, line: int) -> None:
    with pytest.raises(MalformedFileError) as info:
        parse_partition_metadata(data, "p")
    assert info.value.line == line


def test_leader_epoch_checkpoint_errors_name_the_file_and_line() -> None:
    with pytest.raises(MalformedFileError) as info:
        parse_leader_epoch_checkpoint(b"0\n2\n0 0\n", "/d/t-0/leader-epoch-checkpoint")
    assert info.value.path == "/d/t-0/leader-epoch-checkpoint" and info.value.line >= 1
    with pytest.raises(MalformedFileError) as info:
        parse_leader_epoch_checkpoint(b"0\n1\n0 x\n", "c")
    assert info.value.line == 3
    # replayed through assign, as Kafka loads it: a later entry with a lower start truncates
    assert parse_leader_epoch_checkpoint(b"0\n2\n1 0\n2 10\n") == [(1, 0), (2, 10)]
