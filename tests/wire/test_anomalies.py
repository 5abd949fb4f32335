"""The per-client anomalies (`epochguard.wire.anomalies`) on hand-made histories: each rule, and the wrong
rule it must not be (an off-by-one in skip, markers counted as gaps, a seek taken for a rewind)."""

from __future__ import annotations

from typing import Any

from epochguard.wire.anomalies import Ack, Healed, History, Moved, Read, Txn, find_anomalies, summary
from epochguard.wire.drivers.delivery_log import digest
from epochguard.wire.drivers.truth import FinalLog, judge_client

TP = ("events", 0)
IN = ("input", 0)
# Offsets 0-9 hold v0-v9; 10 is a transaction marker (no record); 11-19 hold v11-v19.
HEALED = Healed.of_records({TP: {o: f"v{o}" for o in range(20) if o != 10}}, {TP: 0})


def reads(*offsets: int, value: str = "v") -> list[Read]:
    return [Read(TP, o, f"{value}{o}") for o in offsets]


def found(events: list[Any], healed: Healed = HEALED, **kw: Any) -> list[tuple[str, int, int]]:
    return [(a.name, a.offset, a.count) for a in find_anomalies(History(events, **kw), healed)]


def test_a_monotonic_history_has_no_anomaly() -> None:
    assert found(reads(*range(0, 10), *range(11, 20))) == []


def test_skip_is_more_than_one_index_past_the_last_read() -> None:
    assert found(reads(3, 5)) == [("skip", 4, 1)]  # 4 was never read
    assert found(reads(3, 4)) == []  # the next index: no gap (a `> a` rule would flag it)
    assert found(reads(2, 6)) == [("skip", 3, 3)]  # 3, 4, 5


def test_a_transaction_marker_is_no_gap() -> None:
    # 10 holds a marker, not a record: 9 then 11 are successive indices (Jepsen's dense index)
    assert found(reads(9, 11)) == []
    assert found(reads(8, 11)) == [("skip", 9, 1)]


def test_rewind_is_a_read_at_or_below_the_last() -> None:
    assert found(reads(5, 3)) == [("rewind", 3, 3)]  # 3, 4, 5 consumed again
    assert found(reads(5, 5)) == [("rewind", 5, 1)]  # the same record twice
    assert found(reads(5, 6, 3, 4)) == [("rewind", 3, 4)]  # judged on successive reads, once


def test_a_seek_or_assignment_between_is_neither_a_rewind_nor_a_skip() -> None:
    assert found([*reads(5), Moved(TP), *reads(2)]) == []
    assert found([*reads(5), Moved(), *reads(12)]) == []
    assert found([*reads(5), Moved(("events", 1)), *reads(2)]) == [("rewind", 2, 4)]  # another partition's


def test_phantoms_are_one_run_and_the_rewind_after_them_is_the_divergences() -> None:
    events = [*reads(8, 9), *reads(11, 12, 13, value="zombie"), *reads(11, 12)]
    assert found(events) == [("phantom-read", 11, 3)]  # re-read from the divergence point: no rewind
    silent = [*reads(8, 9), *reads(11, 12, value="zombie"), *reads(16)]
    assert found(silent) == [("phantom-read", 11, 2)]  # the jump after phantoms is the divergence's `silent`
    # another partition's reads in between do not split a run
    mixed = [Read(TP, 11, "z11"), Read(("events", 1), 0, "w0"), Read(TP, 12, "z12")]
    healed = Healed.of_records({TP: HEALED.values[TP], ("events", 1): {0: "w0"}}, {TP: 0})
    assert found(mixed, healed) == [("phantom-read", 11, 2)]


def test_records_below_the_log_start_were_deleted_not_replaced_nor_skipped() -> None:
    healed = Healed.of_records({TP: {o: f"v{o}" for o in range(12, 20)}}, {TP: 12})
    assert found(reads(3, 12), healed) == []  # out-of-range's, not a skip; 3 is no phantom
    assert found(reads(3, 4, 14), healed) == []  # 4 + 1 < 12: the jump over the deleted records is the log start's
    assert found(reads(10, 14), healed) == []
    assert found(reads(11, 14), healed) == [("skip", 12, 2)]  # its position was the log start: 12, 13 skipped


def test_unseen_counts_what_a_stalled_client_never_reached() -> None:
    assert found(reads(0, 1, 2), stalled={TP}) == [("unseen", 3, 16)]  # 3-9 and 11-19
    assert found(reads(0, 1, 2)) == []  # still reading when the run ended: lag, not unseen
    assert found([], stalled={TP}) == [("unseen", 0, 19)]


def test_acknowledged_sends() -> None:
    healed = Healed.of_records({IN: {0: "a", 1: "b", 2: "b", 3: "d", 4: "c"}}, {IN: 0})

    def acks(*sent: tuple[int, str]) -> list[tuple[str, int, int]]:
        history = History(acks=[Ack(IN, o, v) for o, v in sent])
        return [(a.label, a.offset, a.count) for a in find_anomalies(history, healed)]

    assert acks((0, "a"), (1, "b")) == [("duplicate-write", 2, 1)]
    assert acks((0, "a"), (5, "x")) == [("lost-ack", 5, 1)]
    assert acks((3, "c"), (4, "d")) == [("send-reorder", 3, 1)]  # d acked after c, held below it
    assert acks((3, "d"), (4, "c")) == []
    expected = find_anomalies(History(acks=[Ack(IN, 5, "x")]), healed, expected=lambda _a: True)
    assert [a.label for a in expected] == ["lost-ack/expected"]


def test_aborted_reads() -> None:
    assert [a.name for a in find_anomalies(History(reads(4, 5)), HEALED, aborted={"v5"})] == ["aborted-read"]


def test_served_batches_compare_by_their_base_offsets_value() -> None:
    """The server's side: a batch read is a range, its value the batch's CRC at its base offset."""
    healed = Healed({TP: {0: 100, 5: 105, 11: 111}}, {TP: [(0, 4), (5, 9), (11, 14)]}, {TP: 0})
    served = [Read(TP, 2, 100, last=4, at=0), Read(TP, 5, 105, last=9, at=5), Read(TP, 11, 111, last=14, at=11)]
    assert found(served, healed) == []  # fetched from 2 into the first batch; the marker at 10 is no gap
    assert found([served[0], served[2]], healed) == [("skip", 5, 5)]
    assert found([served[0], Read(TP, 5, 999, last=9, at=5)], healed) == [("phantom-read", 5, 5)]


def test_the_delivery_log_truth_names_them() -> None:
    final = FinalLog({("events", 0): {o: digest(f"v{o}".encode()) for o in range(10)},
                      ("input", 0): {0: digest(b"p0"), 1: digest(b"p0")}},
                     {("events", 0): 0, ("input", 0): 0}, {("events", 0): 10, ("input", 0): 2})

    def consumed(t: float, offset: int) -> dict[str, Any]:
        return {"t": t, "kind": "consumed", "topic": "events", "partition": 0, "offset": offset,
                "leader_epoch": None, "digest": digest(f"v{offset}".encode())}

    log = [{"t": 0.0, "kind": "start", "client_id": "c"}, consumed(1.0, 0), consumed(1.1, 2),
           consumed(1.2, 1), {"t": 1.3, "kind": "assigned", "topic": "events"}, consumed(1.4, 0),
           {"t": 1.5, "kind": "produced", "topic": "input", "partition": 0, "offset": 0, "digest": digest(b"p0")},
           {"t": 1.6, "kind": "produced", "topic": "input", "partition": 0, "offset": 2, "digest": digest(b"p9")},
           {"t": 20.0, "kind": "stop"}]
    truth = judge_client(log, final, stuck_after_s=5.0, unclean=True)
    assert summary(truth.anomalies) == {"skip": 1, "rewind": 1, "duplicate-write": 1, "lost-ack/expected": 1,
                                        "unseen": 1}
    assert summary(judge_client(log, final, stuck_after_s=5.0).anomalies)["lost-ack"] == 1


def test_send_reorder_compares_successive_acks_as_jepsen() -> None:
    healed = Healed.of_records({IN: {0: "a", 1: "b", 2: "c", 3: "d"}}, {IN: 0})
    history = History(acks=[Ack(IN, 3, "d"), Ack(IN, 0, "a"), Ack(IN, 1, "b"), Ack(IN, 2, "c")])
    # one reorder (d then a); b and c each follow the ack before them (a `< highest so far` rule flags three)
    assert [(a.name, a.offset) for a in find_anomalies(history, healed)] == [("send-reorder", 0)]


def test_a_read_the_healed_log_does_not_hold_is_no_rewind_nor_skip() -> None:
    # a zombie's record at 5 after 9: the phantom-read, not a rewind (Jepsen: no index, no delta)
    assert found([*reads(9), Read(TP, 5, "zombie5"), *reads(10 + 1)]) == [("phantom-read", 5, 1)]


def test_producer_stuck_is_no_ack_for_the_bound_with_a_failure_after_the_last() -> None:
    healed = Healed.of_records({IN: {0: "a", 1: "b"}}, {IN: 0})

    def stuck(failed_at: float | None, end: float) -> list[tuple[str, int]]:
        history = History(acks=[Ack(IN, 0, "a", at=1.0), Ack(IN, 1, "b", at=2.0)], end=end,
                          failed={} if failed_at is None else {IN: failed_at})
        return [(a.name, a.offset) for a in find_anomalies(history, healed, stuck_after=10.0)]

    assert stuck(3.0, 12.0) == [("producer-stuck", 1)]  # failing from 3.0, nothing acknowledged after 1 at 2.0
    assert stuck(3.0, 11.9) == []  # the bound not reached yet
    assert stuck(None, 50.0) == []  # it stopped sending by itself: nothing failed
    assert stuck(1.5, 50.0) == []  # it failed, then got through again


def test_the_delivery_log_truth_names_a_stuck_producer() -> None:
    final = FinalLog({("input", 0): {0: digest(b"p0")}}, {("input", 0): 0}, {("input", 0): 1})

    def produced(t: float, offset: int | None, partition: int | None = 0) -> dict[str, Any]:
        return {"t": t, "kind": "produced", "topic": "input", "partition": partition, "offset": offset,
                "digest": digest(b"p0" if offset == 0 else b"px"), "error": None if offset is not None else "_FATAL"}

    # failed sends without a partition (librdkafka's purged queue) count for the topic's acknowledged partitions
    log = [produced(1.0, 0), produced(1.2, None, None), {"t": 10.0, "kind": "stop"}]
    assert summary(judge_client(log, final, stuck_after_s=5.0).anomalies) == {"producer-stuck": 1}
    assert summary(judge_client(log[:1] + log[2:], final, stuck_after_s=5.0).anomalies) == {}


# Transactions on TP: 0-4 committed (marker at 5), 6-9 aborted (marker at 10), 11-15 committed (marker at
# 16), 17-19 a transaction still open (no marker yet: no `Txn`).
TXNS = {TP: [Txn(0, 4, ((0, 4),), True), Txn(6, 9, ((6, 9),), False), Txn(11, 15, ((11, 15),), True)]}
TXN_LOG = Healed.of_records({TP: {o: f"v{o}" for o in range(20) if o not in (5, 10, 16)}}, {TP: 0}, TXNS)


def committed(events: list[Any], **kw: Any) -> list[tuple[str, int, int]]:
    return found(events, TXN_LOG, read_committed=True, **kw)


def test_an_aborted_transaction_is_no_gap_for_a_read_committed_client_nor_a_phantom_when_read() -> None:
    assert committed(reads(*range(0, 5), *range(11, 16))) == []  # 6-9 aborted: skipped, as it must
    # read_uncommitted read it: no phantom (the log holds those values), no rewind, no skip
    assert found(reads(*range(0, 5), *range(6, 10), *range(11, 16), 17, 18, 19), TXN_LOG) == []


def test_torn_txn_is_part_of_a_committed_transaction_read_on_the_way_past_it() -> None:
    # 11-15 committed: 11 and 12 read, then 17: 13-15 missed (a skip too: the records are held)
    assert committed(reads(3, 4, 11, 12, 17)) == [("skip", 13, 3), ("torn-txn", 11, 3)]
    # all of it read: no tear (a rule counting reads, not distinct records, would be fooled by a re-read)
    assert committed(reads(4, 11, 12, 12, 13, 14, 15, 17)) == [("rewind", 12, 1)]
    assert committed(reads(4, 11, 12, 11, 17)) == [("rewind", 11, 2), ("skip", 12, 4), ("torn-txn", 11, 3)]
    # none of it read: a skip, no tear (a rule taking "not all" alone would call it torn)
    assert committed(reads(4, 17)) == [("skip", 5, 5)]
    # still inside it when the history ends, or a position set inside it on purpose: undecided, no tear
    assert committed(reads(4, 11, 12)) == []
    assert committed([*reads(4), Moved(TP), *reads(13, 14, 15, 17)]) == []
    assert committed(reads(13, 14, 15, 17)) == []
    # a read_uncommitted client promises no atomicity: only the skip
    assert found(reads(4, 11, 12, 17), TXN_LOG) == [("skip", 13, 3)]


def test_torn_txn_on_served_batches() -> None:
    """The server's side: a transaction of two batches (11-12, 13-15), one of them read."""
    txns = {TP: [Txn(0, 4, ((0, 4),), True), Txn(11, 15, ((11, 12), (13, 15)), True)]}
    healed = Healed({TP: {0: 100, 11: 111, 13: 113, 17: 117}}, {TP: [(0, 4), (11, 12), (13, 15), (17, 19)]},
                    {TP: 0}, txns)
    served = [Read(TP, 0, 100, last=4, at=0), Read(TP, 13, 113, last=15, at=13), Read(TP, 17, 117, last=19, at=17)]
    assert found(served, healed, read_committed=True) == [("skip", 5, 2), ("torn-txn", 11, 2)]


def test_lso_stuck_is_a_stall_right_below_a_decided_transaction() -> None:
    # stalled after 4: the next record is 6, an aborted transaction's first, decided by its marker at 10
    assert committed(reads(*range(0, 5)), stalled={TP}) == [("unseen", 5, 8), ("lso-stuck", 6, 8)]
    # through the aborted transaction (as a read_uncommitted client would), then a stall below a committed one
    assert committed(reads(*range(0, 5), *range(6, 10)), stalled={TP}) == [("unseen", 10, 8), ("lso-stuck", 11, 8)]
    # stalled after 15: 17-19 are a transaction still open, which no read_committed client may read
    assert committed(reads(*range(11, 16)), stalled={TP}) == [("unseen", 16, 3)]
    # stalled in the middle of a transaction: no LSO holds it there (a rule taking the transaction the next
    # record belongs to, not the one it starts, would)
    assert committed(reads(11, 12), stalled={TP}) == [("unseen", 13, 6)]
    # not stalled, or read_uncommitted: none
    assert committed(reads(*range(0, 5))) == []
    assert found(reads(*range(0, 5)), TXN_LOG, stalled={TP}) == [("unseen", 5, 8)]


def test_the_final_log_tells_aborted_transactions_from_the_two_readers() -> None:
    """`read_final_log`'s rule: a run of records a marker ends is a transaction, aborted when the
    read_committed reader went past it without them, left out when it never got that far."""
    from epochguard.wire.drivers.truth import _transactions

    everything = {o: f"d{o}" for o in range(20) if o not in (5, 10, 16)}
    committed = {o: f"d{o}" for o in [*range(0, 5), *range(11, 16)]}
    assert _transactions(everything, committed, 0, 20) == (
        Txn(0, 4, ((0, 4),), True), Txn(6, 9, ((6, 9),), False), Txn(11, 15, ((11, 15),), True))  # 17-19: open
    # the read_committed reader stopped at 5 (its LSO): 6-9 is undecided for it, not aborted
    assert _transactions(everything, {o: f"d{o}" for o in range(0, 5)}, 0, 20) == (Txn(0, 4, ((0, 4),), True),)
    # a log without markers has no transaction (its tail is no open one either)
    assert _transactions({o: "x" for o in range(5)}, {o: "x" for o in range(5)}, 0, 5) == ()


def test_the_delivery_log_truth_names_an_aborted_read_and_leaves_markers_out() -> None:
    values = {o: digest(f"v{o}".encode()) for o in range(20) if o not in (5, 10, 16)}
    final = FinalLog({TP: values}, {TP: 0}, {TP: 20}, {TP: TXNS[TP]})

    def consumed(offset: int, value: bytes | None = None) -> dict[str, Any]:
        return {"t": 1.0 + offset / 100, "kind": "consumed", "topic": "events", "partition": 0, "offset": offset,
                "leader_epoch": None, "digest": digest(value or f"v{offset}".encode())}

    # read_committed, but it handed out 6 (aborted) and the marker at 10 (kafka-go's reader does both)
    log = [{"t": 0.0, "kind": "start", "client_id": "c"}, *[consumed(o) for o in range(0, 5)], consumed(6),
           consumed(10, b"\x00\x00\x00\x00\x00\x00"), *[consumed(o) for o in range(11, 16)], {"t": 2.0, "kind": "stop"}]
    truth = judge_client(log, final, stuck_after_s=5.0, read_committed=True)
    assert truth.markers_read == 1 and truth.divergences == []  # the marker is no phantom, nor a divergence
    assert [(a.name, a.offset) for a in truth.anomalies] == [("aborted-read", 6)]
    # without the transactions (a final log read once, read_committed) 6 is an ordinary record and the
    # marker at 10 a phantom: the aborted read is missed
    bare = judge_client(log, FinalLog({TP: values}, {TP: 0}, {TP: 20}), stuck_after_s=5.0, read_committed=True)
    assert [(a.name, a.offset) for a in bare.anomalies] == [("phantom-read", 10)] and bare.markers_read == 0
