"""The watcher's lso-stuck event (issue 34, KAFKA-20716: an unclean election can drop a transaction's end marker,
leaving the last stable offset below the high watermark for good): message level, on the scripted cluster of
`test_watcher`, whose leader answers ListOffsets LATEST under read_committed with the LSO the test sets and
DescribeProducers with the producers it lists. Each test names the wrong rule it turns red on."""

from __future__ import annotations

from epochguard.client.watcher import LsoStuck, Truncation, Watcher
from epochguard.errors import Errors
from epochguard.protocol.messages import (
    DescribeProducersPartition,
    DescribeProducersRequest,
    DescribeProducersResponse,
    ListOffsetsPartitionResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    ProducerState,
    Request,
)
from epochguard.types import IsolationLevel, TopicPartition

from .test_watcher import TP, Cluster, run_round, watching

TIMEOUT_MS = 2_500  # rounds are 1,000 ms apart: stuck from the fourth round that sees it


class TxnCluster(Cluster):
    def __init__(self, topics: dict[str, int] | None = None) -> None:
        super().__init__(topics)
        self.lso: dict[TopicPartition, int] = {}  # read_committed LATEST; default: the high watermark
        self.producers: dict[TopicPartition, tuple[ProducerState, ...]] = {}
        self.describe_error = Errors.NONE

    def _ListOffsetsRequest(self, node: int, request: ListOffsetsRequest) -> ListOffsetsResponse:
        answer = super()._ListOffsetsRequest(node, request)
        if request.isolation_level != IsolationLevel.READ_COMMITTED:
            return answer
        return ListOffsetsResponse(tuple(
            a if a.error_code != Errors.NONE else ListOffsetsPartitionResponse(
                a.topic, a.partition_index, offset=self.lso.get(a.tp, a.offset), leader_epoch=a.leader_epoch)
            for a in answer.partitions))

    def _DescribeProducersRequest(self, node: int, request: DescribeProducersRequest) -> DescribeProducersResponse:
        return DescribeProducersResponse(tuple(
            DescribeProducersPartition(tp.topic, tp.partition, self.describe_error, None,
                                       self.producers.get(tp, ()) if self.describe_error == Errors.NONE else ())
            for tp in request.partitions))


HANGING = ProducerState(4000, 2, last_sequence=1, last_timestamp=1_700_000_000_000, current_txn_start_offset=11)
IDLE = ProducerState(5000, 0, last_sequence=7, last_timestamp=1_700_000_000_000, current_txn_start_offset=-1)


def truncated(**kw) -> tuple[TxnCluster, Watcher]:
    """An unclean election truncated TP (reported); the new leader then took 3 records, 10..12, whose
    transaction started at 11 lost its marker: LSO 11, high watermark 13."""
    c = TxnCluster()
    c.behind(10, 10)
    w = watching(c, transaction_timeout_ms=TIMEOUT_MS, **kw)
    c.unclean_to_2()
    assert [type(e) for e in run_round(w, c)] == [Truncation]
    c.produce(3, replicate=(2,))
    c.lso[TP] = 11
    c.producers[TP] = (IDLE, HANGING)
    return c, w


def rounds(w: Watcher, c: Cluster, n: int) -> list:
    return [e for _ in range(n) for e in run_round(w, c)]


def stuck(events: list) -> list[LsoStuck]:
    return [e for e in events if isinstance(e, LsoStuck)]


def test_a_stuck_lso_on_a_truncated_partition_is_one_event_naming_the_open_transaction() -> None:
    """Wrong rules: alarming before the transaction timeout; alarming twice for one episode; naming a producer
    without an open transaction."""
    c, w = truncated()
    first = run_round(w, c)
    assert first == [] and w.partitions[TP].lso_since >= 0
    since = w.partitions[TP].lso_since
    assert stuck(rounds(w, c, 2)) == []  # 1,000 and 2,000 ms: within the timeout
    [event] = stuck(rounds(w, c, 1))
    assert (event.topic, event.partition, event.lso, event.hw, event.since) == ("events", 0, 11, 13, since)
    assert event.detected_at - since >= TIMEOUT_MS and event.note == ""
    assert event.producers == ({"producer_id": 4000, "producer_epoch": 2, "current_txn_start_offset": 11,
                                "last_timestamp": 1_700_000_000_000},)
    assert event.to_json()["event"] == "lso-stuck" and event.to_json()["producers"][0]["producer_id"] == 4000
    assert stuck(rounds(w, c, 5)) == []  # the same episode: once
    # The LSO moves (the transaction was aborted by hand): the episode ends; stuck again later is a new one.
    c.lso[TP] = 13
    assert stuck(rounds(w, c, 1)) == [] and w.partitions[TP].lso_since == -1
    c.produce(2, replicate=(2,))
    c.lso[TP] = 14
    assert [e.lso for e in stuck(rounds(w, c, 5))] == [14]


def test_an_lso_left_where_the_high_watermark_was_starts_an_episode() -> None:
    """Wrong rule: an episode starting only when the LSO value changes (the transaction opened right at the old
    high watermark, 10: the LSO read before it, equal to the high watermark then, is the same number)."""
    c, w = truncated()
    assert w.partitions[TP].lso == 10 and w.partitions[TP].lso_since == -1  # read after the truncation: LSO = HW
    c.lso[TP] = 10
    [event] = stuck(rounds(w, c, 5))
    assert (event.lso, event.hw) == (10, 13)


def test_an_lso_that_moves_is_not_stuck() -> None:
    """Wrong rule: alarming on an LSO below the high watermark however it moves (transactions completing)."""
    c, w = truncated()
    events = []
    for _ in range(8):
        c.produce(2, replicate=(2,))
        c.lso[TP] += 2  # always below the high watermark, never standing still
        events += run_round(w, c)
    assert stuck(events) == []


def test_an_untruncated_partition_is_never_asked_for_its_lso() -> None:
    """Wrong rule: alarming on any partition with an open transaction (a long transaction is not a lost marker)."""
    c = TxnCluster()
    c.produce(10)
    w = watching(c, transaction_timeout_ms=TIMEOUT_MS)
    c.lso[TP] = 5
    assert rounds(w, c, 8) == []
    assert not any(isinstance(r, ListOffsetsRequest) and r.isolation_level == IsolationLevel.READ_COMMITTED
                   for _, r in c.requests)
    assert not any(isinstance(r, DescribeProducersRequest) for _, r in c.requests)


def test_a_leader_that_will_not_describe_its_producers_is_said_plainly() -> None:
    c, w = truncated()
    c.describe_error = Errors.CLUSTER_AUTHORIZATION_FAILED
    [event] = stuck(rounds(w, c, 5))
    assert event.producers is None
    assert event.note == ("the leader refused DescribeProducers (CLUSTER_AUTHORIZATION_FAILED): the producers are "
                          "not known")
    c2, w2 = truncated()

    def silent(node: int, request: Request):
        return None if isinstance(request, DescribeProducersRequest) else TxnCluster.answer(c2, node, request)

    c2.answer = silent  # type: ignore[method-assign]
    [event2] = stuck(rounds(w2, c2, 5))
    assert event2.producers is None and "did not answer" in event2.note
    assert stuck(rounds(w2, c2, 3)) == []  # not retried into a second event


def test_the_episode_survives_a_restart_from_the_state_file() -> None:
    """Wrong rules: a restarted watcher forgetting the partition was truncated (never alarming), or that it
    already reported the episode (alarming again)."""
    c, w = truncated()
    rounds(w, c, 2)
    state = w.positions()
    assert state["lso"] == [["events", 0, 11, w.partitions[TP].lso_since, False]]
    again = Watcher(interval_ms=1000, bootstrap_nodes=(1, 2, 3), transaction_timeout_ms=TIMEOUT_MS)
    again.restore(state)
    again._next_round_ms = w._next_round_ms  # the same clock: it goes on where the first stopped
    assert [e.lso for e in stuck(rounds(again, c, 3))] == [11]
    reported = again.positions()
    third = Watcher(interval_ms=1000, bootstrap_nodes=(1, 2, 3), transaction_timeout_ms=TIMEOUT_MS)
    third.restore(reported)
    third._next_round_ms = again._next_round_ms
    assert stuck(rounds(third, c, 3)) == []


def test_an_lso_read_above_the_high_watermark_read_raises_the_position() -> None:
    """Wrong rule: the position only from the read_uncommitted answer. The high watermark moved between the
    round's two reads (its producer writes all the time): the LSO, at most the high watermark when given out,
    shows committed records a read_committed consumer could read, which a loss must count (found on serve's
    consecutive-unclean under load: a loss reported one record short of the last offset given out)."""
    c, w = truncated()
    c.lso.clear()  # no open transaction: LSO = high watermark
    reads: list[tuple[IsolationLevel, int]] = []
    served = c._ListOffsetsRequest

    def moving(node: int, request: ListOffsetsRequest) -> ListOffsetsResponse:
        if request.isolation_level == IsolationLevel.READ_COMMITTED:
            c.produce(1, replicate=(2,))  # between the round's two reads
        answer = served(node, request)
        reads.append((request.isolation_level, answer.partitions[0].offset))
        return answer

    c._ListOffsetsRequest = moving  # type: ignore[method-assign]
    assert run_round(w, c) == []
    (_, hw_read), (level, lso_read) = reads[-2:]
    assert level == IsolationLevel.READ_COMMITTED and lso_read == hw_read + 1
    p = w.partitions[TP]
    assert (p.hw, p.hw_epoch) == (lso_read, 1)  # the record below it is in the new leader's epoch
