"""Fetched data between the Fetch answer and `poll()` (Kafka's `CompletedFetch` and `FetchCollector`):
what a decoded record carries (checked against kafka-python's reader), which batches of an answer are
read (a torn tail, batches before the fetch offset, aborted transactions under each isolation level),
and what `poll()` hands out or raises when the buffered fetches no longer all apply."""

from __future__ import annotations

import pytest
from consumer_script import Cluster, consumer, sent_now
from protocol_support import kafka_python_batch

from epochguard._core import encode_batch
from epochguard.client.consumer import CompletedFetch
from epochguard.errors import OffsetOutOfRangeError
from epochguard.protocol.messages import AbortedTransaction, FetchRequest
from epochguard.types import (
    ConsumerRecord,
    FetchPosition,
    IsolationLevel,
    LeaderAndEpoch,
    OffsetAndMetadata,
    TopicPartition,
)

A = TopicPartition("a", 0)
B = TopicPartition("a", 1)
LEADER = LeaderAndEpoch(1, 2)
RC, RU = IsolationLevel.READ_COMMITTED, IsolationLevel.READ_UNCOMMITTED


def at(offset: int, epoch: int | None = None) -> FetchPosition:
    return FetchPosition(offset, epoch, LEADER)


# --- CompletedFetch.decode ----------------------------------------------------------------------------
@pytest.mark.parametrize("timestamp_type", [0, 1])
def test_a_record_carries_its_timestamp_timestamp_type_and_headers_as_kafka_python_reads_them(timestamp_type):
    from kafka.record.default_records import DefaultRecordBatch

    raw = encode_batch(
        [(b"k", b"v", [("h", b"1"), ("n", None)], 1_234), (None, b"w", [], 1_240)],
        base_offset=3, partition_leader_epoch=2, timestamp_type=timestamp_type, base_timestamp=1_234,
    )
    fetched = CompletedFetch.decode(A, at(3), raw)
    expected = [
        ConsumerRecord("a", 0, r.offset, r.timestamp, r.timestamp_type, r.key, r.value, tuple(r.headers), 2)
        for r in DefaultRecordBatch(raw)
    ]
    assert fetched.records == expected
    assert [(r.timestamp, r.timestamp_type) for r in fetched.records] == (
        [(1_234, 0), (1_240, 0)] if timestamp_type == 0 else [(1_240, 1), (1_240, 1)]
    )
    assert fetched.records[0].headers == (("h", b"1"), ("n", None))


def test_a_torn_last_batch_is_not_an_error_and_is_fetched_again():
    first, second = kafka_python_batch(0, 1, [b"a", b"b"]), kafka_python_batch(2, 1, [b"c", b"d"])
    fetched = CompletedFetch.decode(A, at(0), first + second[:-7])
    assert [r.offset for r in fetched.records] == [0, 1]
    assert (fetched.next_offset, fetched.last_epoch) == (2, 1)


def test_batches_wholly_before_the_fetch_offset_are_skipped_and_the_later_ones_read():
    raw = b"".join([
        kafka_python_batch(0, 1, [b"a", b"b"]),
        kafka_python_batch(2, 2, [b"c", b"d"]),
        kafka_python_batch(4, 3, [b"e", b"f"]),
    ])
    fetched = CompletedFetch.decode(A, at(3, 2), raw)
    assert [(r.offset, r.leader_epoch) for r in fetched.records] == [(3, 2), (4, 3), (5, 3)]
    assert fetched.epochs == [(2, 3), (3, 4)]
    assert (fetched.next_offset, fetched.last_epoch) == (6, 3)


def test_an_answer_without_batches_keeps_the_position_and_its_epoch():
    fetched = CompletedFetch.decode(A, at(6, 1), b"")
    assert (fetched.records, fetched.next_offset, fetched.last_epoch, fetched.epochs) == ([], 6, 1, [])


def txn(pid: int, base: int, n: int) -> bytes:
    return encode_batch([(None, f"p{pid}-{base + i}".encode()) for i in range(n)], base_offset=base,
                        partition_leader_epoch=1, producer_id=pid, producer_epoch=0, base_sequence=0,
                        is_transactional=True)


def abort_marker(pid: int, base: int) -> bytes:
    return encode_batch([(b"\x00\x00\x00\x00", b"\x00\x00\x00\x00\x00\x00")], base_offset=base,
                        partition_leader_epoch=1, producer_id=pid, producer_epoch=0, is_transactional=True,
                        is_control=True)


def test_read_committed_skips_an_aborted_transaction_of_producer_id_zero():
    raw = txn(0, 0, 2) + abort_marker(0, 2) + kafka_python_batch(3, 1, [b"plain"])
    fetched = CompletedFetch.decode(A, at(0), raw, RC, [AbortedTransaction(0, 0)])
    assert [r.offset for r in fetched.records] == [3]
    assert fetched.next_offset == 4


def test_read_uncommitted_hands_out_aborted_records_even_if_the_answer_lists_the_transaction():
    raw = txn(0, 0, 2) + abort_marker(0, 2) + txn(7, 3, 1)
    fetched = CompletedFetch.decode(A, at(0), raw, RU, [AbortedTransaction(0, 0), AbortedTransaction(7, 3)])
    assert [r.offset for r in fetched.records] == [0, 1, 3]  # the marker is never a record


# --- FetchCollector through poll() ---------------------------------------------------------------------
def two_buffered(**kw):
    """A and B led by broker 1, both fetched in one answer and buffered, not polled yet."""
    cluster = Cluster()
    cluster.lead(A, 1, 1, [(1, 3)])
    cluster.lead(B, 1, 1, [(1, 2)])
    c = consumer(A, B, **kw)
    cluster.run(c, 0)
    assert [p.partition_index for r in cluster.requests(FetchRequest) for p in r.partitions] == [0, 1]
    return cluster, c


def test_a_paused_partition_gets_nothing_and_the_others_get_theirs():
    _cluster, c = two_buffered()
    c.pause(A)
    records = c.poll(0)
    assert [(r.partition, r.offset) for r in records.records()] == [(1, 0), (1, 1)]
    assert c.position(A).offset == 0
    assert records.next_offsets() == {B: OffsetAndMetadata(2, "", 1)}


def test_a_partition_unassigned_with_data_buffered_gets_nothing_and_the_others_get_theirs():
    _cluster, c = two_buffered()
    c.unassign([A])
    assert [(r.partition, r.offset) for r in c.poll(0).records()] == [(1, 0), (1, 1)]


def test_nothing_is_fetched_again_for_a_partition_whose_records_wait_in_the_buffer():
    cluster = Cluster()
    cluster.lead(A, 1, 1, [(1, 3)])
    c = consumer(A)
    cluster.run(c, 0)
    assert sent_now(c, 0, FetchRequest) == []
    assert c.poll(0).count() == 3
    [(_, fetch)] = sent_now(c, 0, FetchRequest)
    assert fetch.partitions[0].fetch_offset == 3


# --- prefetch (beyond Kafka: the network client's, librdkafka's queue) ------------------------------------
def prefetching(hold=lambda r: False):
    """A led by broker 1 with batches [0, 3) [3, 5) [5, 9); prefetch 1 and one batch an answer."""
    cluster = Cluster()
    cluster.lead(A, 1, 1, [(1, 3), (1, 2), (1, 4)])
    c = consumer(A, prefetch=1, max_partition_fetch_bytes=1)
    held = cluster.run(c, 0, rounds=8, hold=hold)
    return cluster, c, held


def fetch_offsets(cluster):
    return [p.fetch_offset for r in cluster.requests(FetchRequest) for p in r.partitions]


def test_prefetch_fetches_on_from_the_buffer_end_once_and_hands_out_in_order():
    cluster, c, _ = prefetching()
    assert fetch_offsets(cluster) == [0, 3]  # 3 while [0, 3) waits unpolled; then two buffered: no more
    assert c.position(A).offset == 0
    assert [r.offset for r in c.poll(0).records()] == [0, 1, 2, 3, 4]
    assert c.position(A) == FetchPosition(5, 1, LeaderAndEpoch(1, 1))
    cluster.run(c, 0, rounds=3)
    assert fetch_offsets(cluster) == [0, 3, 5, 9, 9]  # at the log end the fetch ahead finds nothing, twice
    assert [r.offset for r in c.poll(0).records()] == [5, 6, 7, 8]  # an empty answer ahead moves nothing


def test_fetch_until_stops_fetches_and_prefetches_at_the_end_of_a_range():
    """A reader of [0, 5) (the streaming source's executor): the answer for [0, 3) is followed by a fetch
    ahead from 3, but none from 5, its end, even once everything is handed out; a seek keeps the limit,
    and lifting it fetches on."""
    cluster = Cluster()
    cluster.lead(A, 1, 1, [(1, 3), (1, 2), (1, 4)])
    c = consumer(A, prefetch=1, max_partition_fetch_bytes=1)
    c.fetch_until(A, 5)
    cluster.run(c, 0, rounds=8)
    assert fetch_offsets(cluster) == [0, 3]
    assert [r.offset for r in c.poll(0).records()] == [0, 1, 2, 3, 4]
    cluster.run(c, 0, rounds=4)
    assert fetch_offsets(cluster) == [0, 3]  # at 5: nothing more asked for
    c.seek(A, 4)
    cluster.run(c, 0, rounds=4)
    assert fetch_offsets(cluster) == [0, 3, 4]  # below the end again: fetched, but not on past it
    assert [r.offset for r in c.poll(0).records()] == [4]
    c.fetch_until(A, None)
    cluster.run(c, 0, rounds=2)
    assert fetch_offsets(cluster)[3:4] == [5]


def test_without_prefetch_nothing_is_fetched_while_a_fetch_waits():
    cluster = Cluster()
    cluster.lead(A, 1, 1, [(1, 3), (1, 2)])
    c = consumer(A, max_partition_fetch_bytes=1)
    cluster.run(c, 0, rounds=8)
    assert fetch_offsets(cluster) == [0]


def test_a_seek_drops_the_buffered_chain_and_the_fetch_ahead_in_flight():
    cluster, c, held = prefetching(hold=lambda r: isinstance(r, FetchRequest) and r.partitions[0].fetch_offset == 3)
    [(node, request, response)] = held
    c.seek(A, 1)
    c.on_response(node, request, response, 0)  # the answer ahead of a chain the seek dropped
    assert c.poll(0).count() == 0
    cluster.run(c, 0, rounds=2)
    assert fetch_offsets(cluster) == [0, 3, 1, 3]  # from the seek position, then ahead of it again
    assert [r.offset for r in c.poll(0).records()] == [1, 2, 3, 4]


def test_a_leader_change_drops_the_chain():
    _cluster, c, _ = prefetching()
    c.validate_position(A, LeaderAndEpoch(1, 2))
    assert c.position(A) == FetchPosition(0, None, LeaderAndEpoch(1, 2))
    assert c.poll(0).count() == 0  # both buffered fetches were read from leader epoch 1


def test_an_error_answer_ahead_is_not_acted_on_and_the_buffered_records_stay():
    from epochguard.errors import Errors
    from epochguard.protocol.messages import FetchPartitionData, FetchResponse

    def out_of_range_ahead(node, request):
        answer = cluster.brokers[node].handle(-1, request, 0)
        if request.partitions[0].fetch_offset == 0:
            return answer
        return FetchResponse(tuple(FetchPartitionData(A.topic, A.partition, Errors.OFFSET_OUT_OF_RANGE)
                                   for _ in request.partitions))

    cluster = Cluster()
    cluster.lead(A, 1, 1, [(1, 3), (1, 2)])
    cluster.overrides[FetchRequest] = out_of_range_ahead
    c = consumer(A, prefetch=1, max_partition_fetch_bytes=1, policy="none")
    c.seek(A, 0)
    cluster.run(c, 0, rounds=8)
    assert fetch_offsets(cluster) == [0, 3]  # the back-off holds the next try ahead
    assert [r.offset for r in c.poll(0).records()] == [0, 1, 2]
    cluster.run(c, 10_000, rounds=1)  # from the position itself now: the error is the partition's
    with pytest.raises(OffsetOutOfRangeError, match="a-0 at 3"):
        c.poll(10_000)


def test_an_empty_answer_at_the_log_end_keeps_the_position_epoch():
    cluster = Cluster()
    cluster.lead(A, 1, 1, [(1, 3)])
    c = consumer(A)
    cluster.run(c, 0)
    c.poll(0)
    cluster.run(c, 0, rounds=1)  # fetch at 3: nothing new
    assert c.poll(0).count() == 0
    assert c.position(A) == FetchPosition(3, 1, LeaderAndEpoch(1, 1))


def out_of_range(*seeks: tuple[TopicPartition, int]):
    """Policy none; each partition fetched at a position past its log end (epoch 1, leader (1, 1))."""
    cluster = Cluster()
    cluster.lead(A, 1, 1, [(1, 3)])
    cluster.lead(B, 1, 1, [(1, 2)])
    c = consumer(*(tp for tp, _ in seeks), policy="none")
    for tp, offset in seeks:
        c.seek_position(tp, FetchPosition(offset, 1, LeaderAndEpoch(1, 1)), validate=False)
    cluster.run(c, 0)
    return cluster, c


def test_out_of_range_positions_are_raised_together_by_poll_with_each_offset():
    _cluster, c = out_of_range((B, 50), (A, 100))
    with pytest.raises(OffsetOutOfRangeError, match=r"^fetch positions out of range: a-0 at 100, a-1 at 50$") as raised:
        c.poll(0)
    assert raised.value.offset_out_of_range_partitions == {A: 100, B: 50}
    assert sent_now(c, 0, FetchRequest) == []  # not fetched again while the error stands
    with pytest.raises(OffsetOutOfRangeError):
        c.poll(0)


def test_an_out_of_range_position_awaiting_validation_is_no_longer_raised():
    _cluster, c = out_of_range((A, 100))
    assert c.validate_position(A, LeaderAndEpoch(2, 2)) is True
    assert c.poll(0).count() == 0


def test_an_out_of_range_partition_unassigned_is_no_longer_raised():
    _cluster, c = out_of_range((A, 100), (B, 50))
    c.unassign([A])
    with pytest.raises(OffsetOutOfRangeError) as raised:
        c.poll(0)
    assert raised.value.offset_out_of_range_partitions == {B: 50}


# --- records decoded on demand: objects or Arrow, the same rows ------------------------------------------
ARROW_CASES = {
    "offsets before the position, a torn tail": (
        b"".join([kafka_python_batch(0, 1, [b"a", b"b"]), kafka_python_batch(2, 2, [b"c", b"d"]),
                  kafka_python_batch(4, 3, [b"e", b"f"])[:-3]]), at(3, 2), RU, None),
    "read_committed: an aborted transaction and its marker": (
        txn(0, 0, 2) + abort_marker(0, 2) + kafka_python_batch(3, 1, [b"plain"]) + txn(5, 4, 2), at(0), RC,
        [AbortedTransaction(0, 0)]),
    "read_uncommitted: the marker is never a row": (
        txn(0, 0, 2) + abort_marker(0, 2) + txn(7, 3, 1), at(1), RU, [AbortedTransaction(0, 0)]),
    "the position inside the first batch": (
        kafka_python_batch(0, 1, [b"a", b"b", b"c"]) + kafka_python_batch(3, 2, [b"d"]), at(1), RU, None),
    "every row from the position, two batches": (
        kafka_python_batch(0, 1, [b"a", b"b"]) + kafka_python_batch(2, 2, [b"c", b"d"]), at(0), RU, None),
    "headers, null keys and values": (
        encode_batch([(b"k", None, [("h", b"1"), ("n", None)], 1_234), (None, b"w", [], 1_240)], base_offset=9,
                     partition_leader_epoch=4, base_timestamp=1_234), at(9), RU, None),
}


@pytest.mark.parametrize("case", list(ARROW_CASES))
def test_arrow_rows_are_the_records(case):
    raw, position, level, aborted = ARROW_CASES[case]
    fetched = CompletedFetch.decode(A, position, raw, level, aborted)
    batch = fetched.arrow()
    assert batch.schema.names == ["offset", "timestamp", "timestamp_type", "key", "value", "headers", "leader_epoch"]
    rows = [
        ConsumerRecord("a", 0, r["offset"], r["timestamp"], r["timestamp_type"], r["key"], r["value"],
                       tuple((h["key"], h["value"]) for h in r["headers"]), r["leader_epoch"])
        for r in batch.to_pylist()
    ]
    assert rows == fetched.records
    assert fetched.has_records == bool(rows)


def test_arrow_does_not_import_pandas():
    """`pa.table(x)` imports pandas to ask whether `x` is a DataFrame: seconds on a loaded machine, on
    the first poll_arrow, on the thread that runs the client's network I/O."""
    import subprocess
    import sys

    code = ("import sys\n"
            "from epochguard._core import encode_batch\n"
            "from epochguard.client.consumer import CompletedFetch\n"
            "from epochguard.types import FetchPosition, LeaderAndEpoch, TopicPartition\n"
            "raw = encode_batch([(None, b'v')] * 3, base_offset=5) + encode_batch([(None, b'w')], base_offset=8)\n"
            "at = FetchPosition(6, None, LeaderAndEpoch(1, 0))\n"
            "assert CompletedFetch.decode(TopicPartition('a', 0), at, raw).arrow().column('offset').to_pylist() == [6, 7, 8]\n"
            "print('pandas' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "False"


def test_records_are_not_decoded_until_asked_for(monkeypatch):
    raw = kafka_python_batch(0, 1, [b"a", b"b"])
    fetched = CompletedFetch.decode(A, at(0), raw)
    assert fetched.has_records and (fetched.next_offset, fetched.last_epoch, fetched.epochs) == (2, 1, [(1, 0)])
    assert fetched._records is None  # the headers alone moved the position
    assert [r.value for r in fetched.records] == [b"a", b"b"]
