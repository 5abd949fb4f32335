"""`epochguard.ops.recover`'s rules, message by message, each red under a plausible wrong one: a record two
brokers listed is published once, a record the producer retried to the new leader is not doubled, a
re-run (or a run cut off) publishes nothing twice, control and aborted records never go back, one present
copy stands for one lost record only, the operator's limits skip what they exclude."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from epochguard.ops.recover import (
    PROVENANCE_HEADER,
    LostRecord,
    Present,
    divergence_points,
    lost_by_partition,
    parse_provenance,
    plan,
    provenance,
)
from epochguard.types import TopicPartition

TP = TopicPartition("orders", 3)


def row(offset: int, value: bytes, *, broker: int = 1, epoch: int = 4, kind: str = "lost", control: bool = False,
        headers: Any = None, topic: str = "orders") -> dict[str, Any]:
    return {"topic": topic, "partition": 3, "broker": broker, "offset": offset, "leader_epoch": epoch,
            "timestamp": 1_700_000_000_000 + offset, "timestamp_type": 0, "key": b"k", "value": value,
            "headers": headers or [], "is_control": control, "kind": kind}


def test_the_union_over_brokers_is_one_record_per_offset_and_epoch_in_offset_order_without_control_or_aborted() -> None:
    rows = [row(151, b"b", broker=2), row(150, b"a", broker=2), row(150, b"a", broker=1), row(151, b"b", broker=1),
            row(152, b"marker", control=True), row(153, b"x", kind="aborted"),
            row(150, b"other", broker=3, epoch=5),  # another epoch at the same offset: another record
            row(149, b"h", headers=[{"key": "h", "value": b"1"}])]
    (tp, lost), = lost_by_partition(rows).items()
    from_table = lost_by_partition(pa.Table.from_pylist(rows))[tp]  # the Parquet table's path: the same records
    assert [r._replace(row=-1) for r in from_table] == lost
    assert tp == TP
    assert [(r.offset, r.leader_epoch, r.value, r.broker) for r in lost] == [
        (149, 4, b"h", 1), (150, 4, b"a", 1), (150, 5, b"other", 3), (151, 4, b"b", 1)]
    assert lost[0].headers == (("h", b"1"),)


def test_a_retried_record_is_already_present_once_and_a_rerun_publishes_nothing_again() -> None:
    lost = lost_by_partition([row(o, v) for o, v in ((10, b"same"), (11, b"same"), (12, b"c"), (13, b"d"))])[TP]
    present = [Present(40, b"k", b"same")]  # the producer retried ONE of the two equal records
    first = plan(lost, present)
    assert [(r.offset, at) for r, at in first.already_present] == [(10, 40)]
    assert [r.offset for r in first.publish] == [11, 12, 13]
    # a first run cut off after one record; the re-run skips it by its provenance
    written = [Present(41 + i, r.key, r.value, ((PROVENANCE_HEADER, provenance(r)),))
               for i, r in enumerate(first.publish[:1])]
    second = plan(lost, present + written)
    assert [(r.offset, at) for r, at in second.recovered_before] == [(11, 41)]
    assert [r.offset for r in second.publish] == [12, 13]
    written += [Present(42 + i, r.key, r.value, ((PROVENANCE_HEADER, provenance(r)),))
                for i, r in enumerate(second.publish)]
    third = plan(lost, present + written)
    assert third.publish == [] and len(third.recovered_before) == 3


def test_the_content_match_includes_headers_and_the_limits_skip_what_they_exclude() -> None:
    lost = lost_by_partition([row(20, b"v", headers=[("trace", b"1")]), row(21, b"v", epoch=6), row(22, b"w")])[TP]
    outcome = plan(lost, [Present(50, b"k", b"v")], until_offset=21, from_epoch=5)
    assert outcome.already_present[0][0].offset == 21  # 20 has a header the present record lacks
    assert [r.offset for r in outcome.skipped_by_limits] == [20, 22]  # epoch 4 < 5; offset 22 > 21
    assert outcome.publish == []


def test_provenance_round_trips_with_a_slash_in_the_topic_and_ignores_foreign_values() -> None:
    record = LostRecord("a/b", 0, 7, 3, 2, 0, None, b"v")
    assert parse_provenance(provenance(record)) == ("a/b", 0, 7, 3)
    assert parse_provenance(b"not ours") is None and parse_provenance(None) is None


def test_the_read_starts_at_the_lowest_divergence_point_of_a_diverged_replica() -> None:
    """An aborted record (or a marker) at the divergence point leaves the first lost record above it; the
    new leader may hold a retried copy right at the divergence point, which a read from the first lost
    offset would miss (and double)."""
    rows = [{"topic": "orders", "partition": 3, "broker": 1, "kind": "diverged", "divergence_offset": 150},
            {"topic": "orders", "partition": 3, "broker": 3, "kind": "diverged", "divergence_offset": 148},
            {"topic": "orders", "partition": 3, "broker": 2, "kind": "reference", "divergence_offset": None},
            {"topic": "orders", "partition": 4, "broker": 1, "kind": "behind", "divergence_offset": 7},
            {"topic": "orders", "partition": 5, "broker": 1, "kind": "diverged", "divergence_offset": -1}]
    assert divergence_points(rows) == {TP: 148}


def test_records_of_a_transaction_without_its_marker_are_left_unless_included() -> None:
    rows = [row(30, b"committed"), {**row(31, b"open-1"), "uncommitted": True},
            {**row(32, b"open-2"), "uncommitted": True}, row(33, b"plain")]
    lost = lost_by_partition(rows)[TP]
    assert [r.uncommitted for r in lost] == [False, True, True, False]
    left = plan(lost, [Present(60, b"k", b"open-2")])  # open-2 retried by its producer: it is there
    assert [r.offset for r in left.uncommitted] == [31] and [r.offset for r in left.publish] == [30, 33]
    assert [(r.offset, at) for r, at in left.already_present] == [(32, 60)]
    included = plan(lost, [], include_uncommitted=True)
    assert included.uncommitted == [] and [r.offset for r in included.publish] == [30, 31, 32, 33]
    assert [r.offset for r in plan(lost_by_partition([{k: v for k, v in r.items() if k != "uncommitted"}
                                                      for r in rows])[TP], []).publish] == [30, 31, 32, 33]


def test_the_table_to_publish_carries_each_records_columns_and_its_provenance_last() -> None:
    """`send_arrow`'s table is taken by column from lost_records (the provenance built by column): the same
    key, value, timestamp and headers as each record, its provenance header appended, in the given order."""
    from epochguard.ops.recover import _arrow, _table_lost

    rows = [row(7, b"a", headers=[{"key": "h", "value": b"1"}, {"key": "h", "value": None}]), row(8, b"b"),
            row(9, b"c", broker=2), row(9, b"c", broker=3), {**row(10, b"d"), "headers": None}]
    lost, source = _table_lost(pa.Table.from_pylist(rows))
    records = lost[TP][::-1][:3]  # any subset, any order
    table = _arrow(source, records, 5).to_pylist()
    assert [(t["key"], t["value"], t["timestamp"], t["partition"]) for t in table] == [
        (r.key, r.value, r.timestamp, 5) for r in records]
    assert [[(h["key"], h["value"]) for h in t["headers"]] for t in table] == [
        [*r.headers, (PROVENANCE_HEADER, provenance(r))] for r in records]
    assert records[1].broker == 2  # of the two replicas' copies, the lower broker's
