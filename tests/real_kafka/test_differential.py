"""Differential tests: the same script on a real Kafka 4.4 cluster and on epochguard's simulator.

Script 2 (unclean election of the stale follower, the old leader rejoins and truncates) and script 3
(unclean election of a replica with an empty log) run on both backends (tests/kafka/differential.py);
then every replica's leader-epoch checkpoint, log start/end, high watermark and batches (base offset,
last offset, partition leader epoch, CRC), before and after the old leader truncates, are compared field
by field, and so are the answers to the same OffsetForLeaderEpoch, ListOffsets and Fetch requests.
Scripts 1 (a clean leader bounce), 4 (KIP-207's lagging leader) and 5 (a transaction aborted across a
leader change: markers, LSO, the aborted-transaction index, read_committed answers) likewise.

ELR (KIP-966) is off on the session's cluster, as in Kafka's UncleanLeaderElectionTest. What differs
by design is listed in `KNOWN_DIFFERENCES` with its reason (and in docs/real-kafka.md).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

import pytest

from epochguard._core import iter_batches

from .differential import (
    EARLIEST,
    LATEST,
    Backend,
    KafkaBackend,
    Observer,
    SimBackend,
    fetch,
    list_offsets,
    offset_for_leader_epoch,
    read_txn_index,
    records,
)

pytestmark = [pytest.mark.kafka, pytest.mark.no_mutants]

T0 = 1_700_000_000_000  # record timestamps (CreateTime): the same bytes on both backends


def run_unclean_script(b: Backend, *, empty_follower: bool, observer: Observer | None = None) -> dict[str, Any]:
    """Script 2 (`empty_follower=False`): leader 1 and follower 2 take 5 records; 2 stops; 1 takes 3
    more (acked, to be lost); 1 stops; 2 starts and is elected by ElectLeaders UNCLEAN; 2 takes 2 new
    records; 1 starts, truncates and catches up; 2 takes 1 more.
    Script 3 (`empty_follower=True`): follower 2 stops before anything is written, so the unclean
    leader has an empty log and everything leader 1 acked is lost."""
    out: dict[str, Any] = {}
    out["created"] = b.wait(lambda s: s.leader == 1 and set(s.isr) == {1, 2}, "leader 1, ISR [1, 2]")
    if not empty_follower:
        out["produce_a"] = b.produce(1, records("a", 5, T0))
        b.settle(lambda: b.replica(2).log_end == 5, "follower 2 has the first 5 records")
    b.stop(2)
    out["follower_stopped"] = b.wait(lambda s: s.isr == (1,), "ISR [1]")
    out["produce_b"] = b.produce(1, records("b", 3, T0 + 100))
    b.settle(lambda: b.replica(1).high_watermark == b.replica(1).log_end, "leader 1's HW checkpointed")
    observer = observer or Observer()
    observer.lost_records_written(b, b.replica(1).log_end)
    b.stop(1)
    out["leader_stopped"] = b.wait(lambda s: s.leader == -1, "no leader")
    observer.leader_stopped(b)
    b.start(2)
    b.elect_unclean()
    out["elected"] = b.wait(lambda s: s.leader == 2, "leader 2 (unclean)")
    out["produce_c"] = b.produce(2, records("c", 2, T0 + 200))
    b.settle(lambda: b.replica(2).high_watermark == b.replica(2).log_end, "leader 2's HW checkpointed")
    out["before"] = {r: b.replica(r) for r in (1, 2)}
    observer.elected(b)
    b.start(1)
    out["rejoined"] = b.wait(lambda s: set(s.isr) == {1, 2}, "ISR [1, 2] again")
    out["produce_d"] = b.produce(2, records("d", 1, T0 + 300))

    def settled() -> bool:
        r1, r2 = b.replica(1), b.replica(2)
        return r1.log_end == r2.log_end and r1.high_watermark == r2.high_watermark == r2.log_end
    b.settle(settled, "replica 1 caught up, both HWs at the log end (checkpointed)")
    out["after"] = {r: b.replica(r) for r in (1, 2)}
    observer.settled(b, out["after"][2].log_end)
    out["answers"] = queries(b, 2, out["elected"].leader_epoch, out["after"][2].log_end)
    return out


def run_leader_bounce_script(b: Backend) -> dict[str, Any]:
    """Script 1, clean replication with a leader bounce: replicas [1, 2, 3]; leader 1 takes 5 records
    (acks=all); 1 stops, 2 is elected cleanly and takes 3; 1 starts and rejoins the ISR; a preferred
    election makes 1 the leader again, which takes 2 more. Nothing is lost or truncated."""
    out: dict[str, Any] = {}
    out["created"] = b.wait(lambda s: s.leader == 1 and set(s.isr) == {1, 2, 3}, "leader 1, ISR [1, 2, 3]")
    out["produce_a"] = b.produce(1, records("a", 5, T0))
    b.stop(1)
    out["bounced"] = b.wait(lambda s: s.leader == 2 and set(s.isr) == {2, 3}, "leader 2 (clean), ISR [2, 3]")
    out["produce_b"] = b.produce(2, records("b", 3, T0 + 100))
    b.start(1)
    out["rejoined"] = b.wait(lambda s: set(s.isr) == {1, 2, 3}, "ISR [1, 2, 3] again")
    b.elect_preferred()
    out["preferred"] = b.wait(lambda s: s.leader == 1, "leader 1 again (preferred election)")
    out["produce_c"] = b.produce(1, records("c", 2, T0 + 200))

    def settled() -> bool:
        reps = [b.replica(r) for r in (1, 2, 3)]
        return all(r.log_end == r.high_watermark == 10 for r in reps)
    b.settle(settled, "every replica at offset 10, its HW too (checkpointed)")
    out["after"] = {r: b.replica(r) for r in (1, 2, 3)}
    out["answers"] = queries(b, 1, out["preferred"].leader_epoch, 10,
                             fetches=((0, -1), (5, 0), (5, 1), (8, 1), (8, 2), (10, 2), (15, 2)))
    return out


def run_lagging_leader_script(b: Backend) -> dict[str, Any]:
    """Script 4, KIP-207: replicas [1, 2, 3], broker 2 made the preferred leader (Kafka: a reassignment
    that only reorders the replicas); leader 1 takes 5 records (acks=all) that every replica has; 3
    pauses (still in the ISR); 1 takes 3 records with acks=1, which 2 fetches, but the HW stays at 5
    waiting for 3; a preferred election makes 2 the leader of epoch 1 from offset 8 with its HW at 5:
    ListOffsets, Fetch and OffsetForLeaderEpoch are asked then; 3 resumes, fetches, the HW reaches 8:
    asked again.

    Leader 1 is moved, not stopped: a controlled shutdown waits until every unfenced broker's metadata
    has passed the shutdown's offset (BrokerHeartbeatManager), and a paused one never does: Kafka
    granted broker 1's shutdown only when broker 3 was fenced, 30 s later, with the ISR [2] and the HW
    at 8 by then."""
    out: dict[str, Any] = {}
    out["created"] = b.wait(lambda s: s.leader == 1 and set(s.isr) == {1, 2, 3}, "leader 1, ISR [1, 2, 3]")
    b.prefer(2)
    out["produce_a"] = b.produce(1, records("a", 5, T0))
    b.settle(lambda: all(b.replica(r).high_watermark == 5 for r in (1, 2, 3)), "every replica's HW at 5")
    b.pause(3)
    out["produce_b"] = b.produce(1, records("b", 3, T0 + 100), acks=1)
    b.settle(lambda: b.replica(2).log_end == 8, "follower 2 fetched the acks=1 records")
    b.elect_preferred()
    out["elected"] = b.wait(lambda s: s.leader == 2, "leader 2 (preferred)")
    epoch = out["elected"].leader_epoch
    b.settle(lambda: b.replica(2).high_watermark == 5, "leader 2's HW (5) checkpointed")
    lagging = {r: b.replica(r) for r in (2, 3)}
    out["lagging answers"] = queries(b, 2, epoch, 8, fetches=((0, -1), (5, 0), (8, 0)))
    # still the KIP-207 window: 3 never left the ISR (without it the HW would have reached 8)
    out["still lagging"] = b.wait(lambda s: True, "the partition's state")
    out["lagging"] = lagging
    b.resume(3)
    b.settle(lambda: all(b.replica(r).high_watermark == 8 for r in (1, 2, 3)), "3 caught up, every HW at 8")
    out["caught-up answers"] = queries(b, 2, epoch, 8, fetches=((0, -1), (5, 0), (8, 0), (8, 1)))
    out["after"] = {r: b.replica(r) for r in (1, 2, 3)}
    return out


def run_txn_script(b: Backend) -> dict[str, Any]:
    """Script 5, a transactional producer with one aborted transaction across a leader change: replicas
    [1, 2, 3], broker 2 made the preferred leader; transaction A takes 3 records on leader 1 (epoch 0);
    a preferred election makes 2 the leader (epoch 1) while A is open: asked then (the new leader, which
    learnt of A as a follower, must hold the LSO at A's first offset); A takes 2 more records on leader
    2 and is aborted (its marker in epoch 1): asked; transaction B takes 2 records and commits; every
    replica settles: compared, asked again.

    On Kafka the producer is confluent-kafka's transactional producer and the coordinator writes the
    markers; on the simulator, which has no transaction coordinator, the same batches are replayed byte
    for byte and the markers handed to the leader as the coordinator's WriteTxnMarkers
    (`ReplayTxnProducer`)."""
    out: dict[str, Any] = {}
    out["created"] = b.wait(lambda s: s.leader == 1 and set(s.isr) == {1, 2, 3}, "leader 1, ISR [1, 2, 3]")
    b.prefer(2)
    # Record timestamps of now, not T0 (2023): a marker carries the broker's clock, and Kafka rolls a
    # segment when a batch's timestamp is segment.ms (7 days) past the segment's first (seen: a new
    # segment at the ABORT marker, so one Fetch answer, which holds one segment, stopped there). The
    # simulator replays Kafka's batches, timestamps included.
    now = int(time.time() * 1000)
    txn = b.transactional_producer()
    try:
        txn.begin()
        txn.send("a", 3, now)
        a_end = b.txn_replica(1).log_end
        b.settle(lambda: all(b.replica(r).high_watermark == a_end for r in (1, 2, 3)), "every replica's HW after A")
        b.elect_preferred()
        out["elected"] = b.wait(lambda s: s.leader == 2 and set(s.isr) == {1, 2, 3}, "leader 2 (preferred)")
        epoch = out["elected"].leader_epoch
        out["open answers"] = txn_queries(b, 2, epoch, (0, a_end))
        txn.send("b", 2, now + 100)
        txn.end(commit=False)

        def abort_replicated() -> bool:
            r = b.txn_replica(2)
            return r.batches[-1][6] == 0 and r.high_watermark == r.log_end
        # asked once the HW has passed the marker: until then Kafka's LSO stays at the transaction's first
        # offset (ProducerStateManager's unreplicatedTxns), seen in this script's first run
        b.settle(abort_replicated, "leader 2 wrote the ABORT marker and the HW passed it (checkpointed)")
        aborted_end = b.txn_replica(2).log_end
        out["aborted answers"] = txn_queries(b, 2, epoch, (0, a_end, aborted_end))
        txn.begin()
        txn.send("c", 2, now + 200)
        txn.end(commit=True)
    finally:
        txn.close()

    def settled() -> bool:
        reps = [b.txn_replica(r) for r in (1, 2, 3)]
        return (reps[1].batches[-1][6] == 1 and len({r.log_end for r in reps}) == 1
                and all(r.high_watermark == r.log_end for r in reps))
    b.settle(settled, "every replica has the COMMIT marker, every HW at the log end (checkpointed)")
    out["after"] = {r: b.txn_replica(r) for r in (1, 2, 3)}
    leo = out["after"][2].log_end
    out["committed answers"] = txn_queries(b, 2, epoch, (0, a_end, aborted_end, leo - 1, leo))
    out["answers"] = queries(b, 2, epoch, leo, fetches=((0, -1), (a_end, 0), (a_end, 1), (leo, epoch)))
    if isinstance(b, KafkaBackend):
        out["_written"] = b.written(2)  # what the simulator replays
        out["_txnindex"] = {r: read_txn_index(b.cluster.data_dir(r) / f"{b.topic}-0") for r in (1, 2, 3)}
    return out


def txn_queries(b: Backend, leader: int, epoch: int, offsets: tuple[int, ...]) -> dict[str, Any]:
    """ListOffsets earliest / latest / latest read_committed, and Fetch read_uncommitted and read_committed
    at `offsets`: (error, HW, LSO, log start, aborted transactions, the batches returned as (base, last,
    control))."""
    t = b.topic
    ans: dict[str, Any] = {}
    for name, ts, iso in (("earliest", EARLIEST, 0), ("latest", LATEST, 0), ("latest committed", LATEST, 1)):
        p = b.send(leader, list_offsets(t, 0, ts, iso, current_leader_epoch=epoch)).topics[0].partitions[0]
        ans[f"list_offsets {name}"] = (p.error_code, p.offset, p.leader_epoch)
    for iso, name in ((0, "uncommitted"), (1, "committed")):
        for offset in offsets:
            r = b.send(leader, fetch(t, 0, offset, current_leader_epoch=epoch, isolation_level=iso))
            p = r.responses[0].partitions[0]
            aborted = None if p.aborted_transactions is None else tuple(
                (a.producer_id, a.first_offset) for a in p.aborted_transactions)
            got = tuple((x.base_offset, x.last_offset, x.is_control) for x in iter_batches(bytes(p.records or b"")))
            ans[f"fetch read_{name} offset={offset}"] = (
                p.error_code, p.high_watermark, p.last_stable_offset, p.log_start_offset, aborted, got)
    return ans


_FETCHES = ((0, -1), (5, 0), (7, 0), (8, 0))


def queries(b: Backend, leader: int, epoch: int, leo: int,
            fetches: tuple[tuple[int, int], ...] | None = None) -> dict[str, Any]:
    """The same OffsetForLeaderEpoch, ListOffsets and Fetch requests to the leader; `fetches` are
    (offset, last fetched epoch) pairs (default: the unclean scripts', then the log end and past it)."""
    t = b.topic
    ans: dict[str, Any] = {}
    for current in (-1, epoch, epoch - 1, epoch + 1):  # unchecked, current, fenced, unknown (newer)
        for requested in (0, epoch - 1, epoch, epoch + 1):  # below/inside/at/above the cache
            r = b.send(leader, offset_for_leader_epoch(t, 0, requested, current))
            p = r.topics[0].partitions[0]
            ans[f"ofle current={current} requested={requested}"] = (p.error_code, p.leader_epoch, p.end_offset)
    for name, ts, iso in (("earliest", EARLIEST, 0), ("latest", LATEST, 0), ("latest committed", LATEST, 1),
                          ("max timestamp", -3, 0), ("ts a-1", T0 + 1, 0), ("ts b-0", T0 + 100, 0),
                          ("ts c-1", T0 + 201, 0), ("ts beyond", T0 + 10_000, 0)):
        r = b.send(leader, list_offsets(t, 0, ts, iso))
        p = r.topics[0].partitions[0]
        ans[f"list_offsets {name}"] = (p.error_code, p.timestamp, p.offset, p.leader_epoch)
    points = fetches if fetches is not None else (*_FETCHES, (leo, epoch), (leo + 5, epoch))
    for offset, last_epoch in points:
        r = b.send(leader, fetch(t, 0, offset, last_fetched_epoch=last_epoch, current_leader_epoch=epoch))
        p = r.responses[0].partitions[0]
        div = p.diverging_epoch
        ans[f"fetch offset={offset} last_fetched_epoch={last_epoch}"] = (
            p.error_code, p.high_watermark, p.last_stable_offset, p.log_start_offset,
            None if div is None or div.epoch < 0 else (div.epoch, div.end_offset), len(p.records or b""))
    return ans


def flatten(run: dict[str, Any]) -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in run.items():
        if key.startswith("_"):  # a run's by-products (what the simulator replays), not compared
            continue
        if key in ("before", "after", "lagging"):
            for r, replica in value.items():
                for field, v in asdict(replica).items():
                    flat[f"{key} replica {r} {field}"] = v
        elif key.endswith("answers"):
            flat.update({f"{key.removesuffix('answers')}{k}": v for k, v in value.items()})
        elif hasattr(value, "leader_epoch"):
            flat[f"{key} leader/epoch/isr"] = (value.leader, value.leader_epoch, tuple(sorted(value.isr)))
        else:
            flat[key] = value
    return flat


# Reasoned differences between the two runs (key -> why); every other field must be equal.
KNOWN_DIFFERENCES: dict[str, str] = {}


def compare(kafka: dict[str, Any], sim: dict[str, Any], known: dict[str, str] = KNOWN_DIFFERENCES) -> list[str]:
    k, s = flatten(kafka), flatten(sim)
    assert k.keys() == s.keys()
    return [f"{key}: kafka {k[key]!r} != sim {s[key]!r}" for key in k
            if k[key] != s[key] and key not in known]


@pytest.fixture(scope="module")
def runs(kafka_runs: dict[str, Any]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for script, empty in (("script2", False), ("script3", True)):
        out[f"{script} kafka"] = kafka_runs[script][0]
        out[f"{script} sim"] = run_unclean_script(SimBackend([1, 2]), empty_follower=empty)
    return out


@pytest.mark.parametrize("script", ["script2", "script3"])
def test_unclean_election_same_on_kafka_and_sim(runs: dict[str, dict[str, Any]], script: str) -> None:
    diffs = compare(runs[f"{script} kafka"], runs[f"{script} sim"])
    assert not diffs, "\n".join(diffs)


# name -> (script, assignment of its partition, the simulator's settings beside SimBackend's)
SCRIPTS: dict[str, tuple[Callable[[Backend], dict[str, Any]], list[int], dict[str, Any]]] = {
    "script1": (run_leader_bounce_script, [1, 2, 3], {}),
    # Kafka's replica.lag.time.max.ms (30 s), not serve's 500 ms: a paused follower stays in the ISR
    "script4": (run_lagging_leader_script, [1, 2, 3], {"replica_lag_time_max_ms": 30_000}),
    "script5": (run_txn_script, [1, 2, 3], {}),
}


@pytest.mark.parametrize("script", ["script1", "script4"])
def test_script_same_on_kafka_and_sim(kafka_script: Callable[[str], dict[str, Any]], script: str) -> None:
    fn, assignment, config = SCRIPTS[script]
    diffs = compare(kafka_script(script), fn(SimBackend(assignment, **config)))
    assert not diffs, "\n".join(diffs)


def test_lagging_leader_answers_offset_not_available(kafka_script: Callable[[str], dict[str, Any]]) -> None:
    """KIP-207 on the real broker (script 4): while the new leader's HW (5) is below its epoch's start
    (8), ListOffsets LATEST answers OFFSET_NOT_AVAILABLE; once a follower has caught up, 8."""
    run = kafka_script("script4")
    assert run["still lagging"].isr == run["elected"].isr and set(run["elected"].isr) == {1, 2, 3}, \
        "broker 3 left the ISR during the window (paused too long?): the HW was never held back"
    assert run["lagging"][2].high_watermark == 5 and run["lagging"][2].log_end == 8
    assert run["lagging answers"]["list_offsets latest"][0] == 78  # OFFSET_NOT_AVAILABLE
    assert run["caught-up answers"]["list_offsets latest"][:3] == (0, -1, 8)


# Script 5's reasoned differences: a marker's timestamp is its leader's clock when it wrote it (Kafka:
# the wall clock; the simulator: its own clock, from 0), so the answers that meet a marker's timestamp
# differ, and nothing else does.
TXN_KNOWN_DIFFERENCES = {
    "list_offsets max timestamp": "Kafka: the COMMIT marker (the latest timestamp, the broker's clock); the "
                                  "simulator: the last data record (its markers carry its clock, from 0)",
}


def test_transactions_same_on_kafka_and_sim(kafka_script: Callable[[str], dict[str, Any]]) -> None:
    """Script 5: the real producer's batches and the coordinator's markers replayed on the simulator;
    every replica's batches (markers included, with their epochs), HW, LSO, epoch cache and aborted-
    transaction index, and the read_committed answers, equal."""
    kafka = kafka_script("script5")
    fn, assignment, config = SCRIPTS["script5"]
    sim_backend = SimBackend(assignment, **config)
    sim_backend.replay = kafka["_written"]
    sim = fn(sim_backend)
    diffs = compare(kafka, sim, TXN_KNOWN_DIFFERENCES)
    assert not diffs, "\n".join(diffs)
    # the known difference is the one reasoned: Kafka's max timestamp is the COMMIT marker's
    after = kafka["after"][2]
    assert kafka["answers"]["list_offsets max timestamp"][2] == after.batches[-1][0] == after.log_end - 1
    # what the script claims: A's first batch in epoch 0, its second and its ABORT marker in epoch 1 after
    # the leader change, A listed as aborted from its first offset, B committed
    a_end = kafka["open answers"]["list_offsets latest"][1]
    epochs = {b[0]: (b[2], b[6]) for b in after.batches}
    assert epochs[0] == (0, None) and epochs[a_end] == (1, None)
    [(pid, first, last)] = after.aborted
    assert first == 0 and epochs[last] == (1, 0) and after.batches[-1][6] == 1
    assert kafka["committed answers"]["fetch read_committed offset=0"][4] == ((pid, 0),)
    # Kafka's own transaction index: the entry's LSO is the marker's offset + 1 (no other transaction open)
    assert [e[:3] for e in kafka["_txnindex"][2]] == [(pid, 0, last)] and kafka["_txnindex"][2][0][3] == last + 1
