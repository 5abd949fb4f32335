"""`epochguard.ops.recover`'s rules, message by message, each red under a plausible wrong one: a record two
brokers listed is published once, a record the producer retried to the new leader is not doubled, a
re-run (or a run cut off) publishes nothing twice, control and aborted records never go back, one present
copy stands for one lost record only, the operator's limits skip what they exclude."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

from epochguard.ops.recover import (
    PROVENANCE_HEADER,
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
    assert from_table == lost
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


def test_a_record_recover_wrote_is_recognised_by_the_dedupe_and_a_look_alike_foreign_one_is_not() -> None:
    """The provenance is written once (`_arrow`'s headers, what the producer sends) and read once (the
    plan's dedupe): what a run wrote, read back as the partition holds it, is "recovered before" at its
    offset; records with a header of that name whose value is not one of ours, or names another record,
    are not, and neither stands for the lost record by content either."""
    from epochguard.ops.recover import _arrow, lost_tables

    rows = [row(7, b"a", topic="a/b"), row(8, b"b", topic="a/b", headers=[{"key": "h", "value": b"1"}])]
    (tp, table), = lost_tables(pa.Table.from_pylist(rows)).items()
    sent = _arrow(table, tp.partition).to_pylist()
    written = [Present(100 + i, r["key"], r["value"], tuple((h["key"], h["value"]) for h in r["headers"]))
               for i, r in enumerate(sent)]
    assert [(r.offset, at) for r, at in plan(table, written).recovered_before] == [(7, 100), (8, 101)]
    assert parse_provenance(written[0].headers[-1][1]) == ("a/b", 3, 7, 4)  # the one-record form agrees

    name = PROVENANCE_HEADER
    foreign = [Present(200, b"k", b"x", ((name, b"a/b/3/7/4"),)),  # no broker: not our format
               Present(201, b"k", b"x", ((name, b"a/b/3/7/4/one"),)),
               Present(202, b"k", b"x", ((name, b"a/b/3/7/5/1"),)),  # ours, but another epoch's record
               Present(203, b"k", b"x", ((name.upper(), sent[0]["headers"][-1]["value"]),)),  # another header
               Present(204, b"k", b"x", ((name, None),))]
    outcome = plan(table, foreign)
    assert outcome.recovered_before == [] and outcome.already_present == []
    assert [r.offset for r in outcome.publish] == [7, 8]
    # a look-alike copy with the lost record's own content is not "recovered before", nor present by content
    # (its headers differ), while the written one still counts when both are there
    look_alike = [Present(300, b"k", b"a", ((name, b"a/b/3/7/4"),))]
    assert [r.offset for r in plan(table, look_alike).publish] == [7, 8]
    assert [(r.offset, at) for r, at in plan(table, look_alike + written).recovered_before] == [(7, 100), (8, 101)]
    assert parse_provenance(b"not ours") is None and parse_provenance(None) is None


def test_null_keys_and_values_match_their_retried_copies_and_equal_values_with_other_keys_do_not() -> None:
    lost = lost_by_partition([{**row(1, b"v"), "key": None}, {**row(2, b"v"), "value": None}, row(3, b"v")])[TP]
    present = [Present(10, None, b"v"), Present(11, b"k", None), Present(12, b"other", b"v")]
    outcome = plan(lost, present)
    assert [(r.offset, at) for r, at in outcome.already_present] == [(1, 10), (2, 11)]
    assert [r.offset for r in outcome.publish] == [3]


def test_equal_records_take_their_copies_in_offset_order_and_a_null_header_value_is_not_an_empty_one() -> None:
    h, ab = {"key": "h", "value": None}, {"key": "ab", "value": b"c"}
    lost = lost_by_partition([row(o, b"same", headers=[h]) for o in (1, 2, 3)] + [row(4, b"e", headers=[h]),
                                                                                 row(5, b"v", headers=[ab])])[TP]
    present = [Present(20, b"k", b"same", (("h", None),)), Present(21, b"k", b"same"),  # no header: another
               Present(22, b"k", b"same", (("h", None),)), Present(23, b"k", b"e", (("h", b""),)),
               Present(24, b"k", b"v", (("a", b"bc"),))]  # the same bytes, another header
    outcome = plan(lost, present)
    assert [(r.offset, at) for r, at in outcome.already_present] == [(1, 20), (2, 22)]
    assert [r.offset for r in outcome.publish] == [3, 4, 5]


def test_the_plan_of_many_records_holds_no_python_object_per_lost_record() -> None:
    """The plan works by column: only rows some present record may equal are compared as objects. Planning
    50,000 lost records against 5,000 present ones (2,000 retried copies, 1,000 an earlier run's) takes a
    fraction of the Python memory the records take as `LostRecord`s (tracemalloc: Arrow's buffers are not
    Python objects)."""
    import tracemalloc

    from epochguard.ops.recover import _present_table, _records, lost_tables, provenance_column

    n = 50_000
    table = pa.table({"topic": ["orders"] * n, "partition": pa.array([3] * n, pa.int32()),
                      "offset": pa.array(range(n), pa.int64()), "leader_epoch": pa.array([4] * n, pa.int32()),
                      "broker": pa.array([1] * n, pa.int32()), "timestamp": pa.array(range(n), pa.int64()),
                      "key": pa.array([b"k%d" % i for i in range(n)], pa.binary()),
                      "value": pa.array([b"v%d" % i for i in range(n)], pa.binary())})
    (_, lost), = lost_tables(table).items()
    origins = provenance_column(lost).to_pylist()
    present = [Present(n + i, b"k%d" % (i * 10), b"v%d" % (i * 10)) for i in range(2_000)]
    present += [Present(n + 2_000 + i, b"x", b"y", ((PROVENANCE_HEADER, origins[i * 7 + 1]),)) for i in range(1_000)]
    present += [Present(n + 3_000 + i, b"new", b"%d" % i) for i in range(2_000)]
    present_table = _present_table(present)
    del origins, present

    def peak(work: Any) -> tuple[Any, int]:
        tracemalloc.start()
        try:
            return work(), tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

    outcome, planned = peak(lambda: plan(lost, present_table))
    _, as_objects = peak(lambda: _records(lost))
    both = 100  # offsets 50, 120, ...: a multiple of 10 an earlier run re-published (its provenance first)
    assert outcome.count("recovered before") == 1_000 and outcome.count("already present") == 2_000 - both
    assert outcome.count("publish") == n - 1_000 - 2_000 + both
    assert planned * 5 < as_objects, (planned, as_objects)


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
    from epochguard.ops.recover import _arrow, _records, lost_tables

    rows = [row(7, b"a", headers=[{"key": "h", "value": b"1"}, {"key": "h", "value": None}]), row(8, b"b"),
            row(9, b"c", broker=2), row(9, b"c", broker=3), {**row(10, b"d"), "headers": None}]
    lost = lost_tables(pa.Table.from_pylist(rows))[TP]
    chosen = lost.take([3, 2, 1])  # any subset, any order
    records = _records(chosen)
    table = _arrow(chosen, 5).to_pylist()
    assert [(t["key"], t["value"], t["timestamp"], t["partition"]) for t in table] == [
        (r.key, r.value, r.timestamp, 5) for r in records]
    assert [[(h["key"], h["value"]) for h in t["headers"]] for t in table] == [
        [*r.headers, (PROVENANCE_HEADER, provenance(r))] for r in records]
    assert records[1].broker == 2  # of the two replicas' copies, the lower broker's


def test_a_lost_records_row_without_an_offset_is_a_clear_error() -> None:
    from epochguard.ops.recover import lost_tables

    table = pa.Table.from_pylist([row(1, b"a"), {**row(2, b"b"), "offset": None}])
    with pytest.raises(ValueError, match="1 row\\(s\\) with no offset"):
        lost_tables(table)
