"""Scenarios of `epochguard serve`: a cluster configuration on a real-time scale plus stages of faults.

A simulator scenario fires its faults at fixed steps; here a stage waits for a condition (the
cluster is ready, an ISR has shrunk, some steps have passed, or the real clients have reached a point
the `--trigger` names) and then schedules its faults a number of steps later. The faults are the
simulator's own (`epochguard.sim.faults`), plus pausing the scenario's simulated producer so that a
real consumer can catch up.

Broker settings are scaled so that one step is 10 ms of wall-clock time and the cluster reacts on the
scale of real clients' back-offs (100 ms to 1 s): a dead broker is fenced after 400 ms, a follower
that stops fetching leaves the ISR after 500 ms.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from epochguard.sim.cluster import ClusterConfig
from epochguard.sim.faults import (
    Crash,
    DeleteRecords,
    Fault,
    Heal,
    Isolate,
    LinkDelay,
    PreferredElection,
    Restart,
    StaleMetadata,
    Zombie,
)
from epochguard.sim.network import broker_node
from epochguard.types import TopicPartition

if TYPE_CHECKING:
    from epochguard.sim.cluster import Cluster
    from epochguard.sim.view import FaultTarget

__all__ = [
    "EVENTS",
    "INPUT",
    "WireConfig",
    "Stage",
    "WireScenario",
    "PauseProducers",
    "ResumeProducers",
    "StaleEpochAnswer",
    "SlowClients",
    "StaleLeaderHint",
    "PowerLoss",
    "SCENARIOS",
    "build",
    "FAULT_TYPES",
]

EVENTS = "events"  # written by the scenario's simulated producer
_EVENTS_0 = TopicPartition(EVENTS, 0)  # the default trigger partition
INPUT = "input"  # for real clients to produce to
TICK_MS = 10


@dataclass(frozen=True, slots=True)
class WireConfig(ClusterConfig):
    """`ClusterConfig` with a second topic for real clients; the simulated clients use `topic` only."""

    input_partitions: int = 1

    def assignment(self) -> dict[TopicPartition, tuple[int, ...]]:
        out = ClusterConfig.assignment(self)
        ids = list(range(1, self.brokers + 1))
        for p in range(self.input_partitions):
            out[TopicPartition(INPUT, p)] = tuple(ids[(p + i) % len(ids)] for i in range(self.replication_factor))
        return out


BASE = WireConfig(
    topic=EVENTS,
    tick_ms=TICK_MS,
    replica_lag_time_max_ms=500,
    session_timeout_ms=400,
    heartbeat_interval_ms=50,
    hw_checkpoint_interval_ms=200,
    fetch_backoff_ms=50,
    producers=(1,),
    producer_batch_size=5,
    producer_interval_ms=50,
    consumers=0,
    monitor=False,
    request_timeout_ms=500,
    retry_backoff_ms=100,
    metadata_backoff_ms=100,
    metadata_max_age_ms=1000,
)


@dataclass(frozen=True, slots=True)
class PauseProducers:
    """The scenario's simulated producers stop sending (what is in flight completes)."""

    def apply(self, cluster: FaultTarget) -> None:
        for p in cluster.producers:
            if p in cluster.clients:
                cluster.clients.remove(p)

    def describe(self) -> str:
        return "simulated producers paused"


@dataclass(frozen=True, slots=True)
class ResumeProducers:
    def apply(self, cluster: FaultTarget) -> None:
        for p in cluster.producers:
            if p not in cluster.clients:
                cluster.clients.insert(0, p)

    def describe(self) -> str:
        return "simulated producers resumed"


@dataclass(frozen=True, slots=True)
class StaleEpochAnswer:
    """From now on, `broker` answers each client's first OffsetsForLeaderEpoch for `tp` with an end offset
    `lag` below the truth (not below the log start), though nothing was truncated: the server race of
    redpanda#5435, where a franz-go consumer "lost records; consumed to 219 but was reset to 163". A wire
    fault: the simulated cluster is untouched, `WireCluster` tells the lie (see `WireCluster.fire`)."""

    tp: TopicPartition
    broker: int
    lag: int

    def apply(self, cluster: FaultTarget) -> None:
        pass  # nothing in the cluster changes; the answers do

    def describe(self) -> str:
        return f"broker {self.broker} answers each client's first OffsetsForLeaderEpoch for {self.tp} {self.lag} short"


@dataclass(frozen=True, slots=True)
class SlowClients:
    """For `duration_ms`, `broker` reads no request from a real client (its network threads saturated, or a
    congested path between the clients and it): they wait, in order, and are handled when it ends. The
    cluster's own traffic (replication, the simulated producers) is not slowed. A wire fault, as
    `StaleEpochAnswer`: `WireCluster` holds the requests."""

    broker: int
    duration_ms: int

    def apply(self, cluster: FaultTarget) -> None:
        pass  # nothing in the cluster changes; the request layer waits

    def describe(self) -> str:
        return f"broker {self.broker} reads no client request for {self.duration_ms} ms"


HINT_VARIANTS = ("own-epoch", "older-epoch", "wrong-node")


@dataclass(frozen=True, slots=True)
class StaleLeaderHint:
    """For `duration_ms`, `broker` gives every KIP-951 leader hint it answers for `tps` (a Produce v10+ answered
    NOT_LEADER_OR_FOLLOWER, a Fetch v16+ answered NOT_LEADER_OR_FOLLOWER or FENCED_LEADER_EPOCH) a stale one:
    instead of the leader L and epoch E its state knows, it names the third broker (neither itself nor L) with
    `own-epoch` E-1 (the epoch the clients had before this leader change: their own), `older-epoch` E-2, or
    `wrong-node` E (the current epoch, another node: AutoMQ#3546). franz-go#1413: NOT_LEADER_OR_FOLLOWER hints
    naming the same or an older epoch made its producer retry at round-trip speed with no metadata refresh.
    A wire fault, as `StaleEpochAnswer`: `WireCluster` tells the lie, the cluster is untouched."""

    broker: int
    tps: tuple[TopicPartition, ...]
    variant: str
    duration_ms: int = 1000

    def __post_init__(self) -> None:
        if self.variant not in HINT_VARIANTS:
            raise ValueError(f"unknown hint variant {self.variant!r}; choose from {', '.join(HINT_VARIANTS)}")

    def apply(self, cluster: FaultTarget) -> None:
        pass  # nothing in the cluster changes; the answers do

    def describe(self) -> str:
        return (f"broker {self.broker} answers {self.variant} leader hints for "
                f"{', '.join(map(str, self.tps))} for {self.duration_ms} ms")


@dataclass(frozen=True, slots=True)
class PowerLoss:
    """`broker` loses power: its process dies (as `Crash`) and the last `lost` records of `tp` it had
    appended but not flushed are gone (whole batches): Kafka does not fsync a replica's appends
    (`flush.messages` is unbounded by default) and relies on replication, so on restart its log recovery
    keeps what reached the disk. Its high watermark is clamped to the shorter log on restart."""

    broker: int
    tp: TopicPartition
    lost: int

    def apply(self, cluster: FaultTarget) -> None:
        cluster.crash(self.broker)
        log = cluster.broker(self.broker).logs[self.tp]
        log.truncate_to(max(log.log_start_offset, log.log_end_offset - self.lost))

    def describe(self) -> str:
        return f"broker {self.broker} loses power: the last {self.lost} unflushed records of {self.tp} are gone"


FAULT_TYPES: dict[str, type] = {
    t.__name__: t
    for t in (Crash, Restart, Heal, Isolate, LinkDelay, PreferredElection, StaleMetadata, Zombie, DeleteRecords,
              PauseProducers, ResumeProducers, StaleEpochAnswer, SlowClients, StaleLeaderHint, PowerLoss)
}

# Conditions a stage waits for, before its faults are scheduled.
READY = "ready"  # every partition has a leader serving it
TRIGGER = "trigger"  # the real clients reached the point `--trigger` names (or the wall-clock time-out)
Condition = Callable[["Cluster"], bool]


@dataclass(frozen=True, slots=True)
class Stage:
    wait: str | Condition  # READY, TRIGGER, or a predicate on the cluster
    faults: tuple[tuple[int, Fault], ...] = ()  # (steps after the condition held, fault)
    min_steps: int = 0  # and at least this many steps after the previous stage


@dataclass(frozen=True, slots=True)
class WireScenario:
    name: str
    config: WireConfig
    stages: tuple[Stage, ...]
    description: str
    trigger_partition: TopicPartition = _EVENTS_0
    settle_steps: int = 100  # after the last fault, with every partition led again: `settled`
    commit_trigger: bool = False  # the TRIGGER stage also waits for a commit from the client
    extra: dict[str, object] = field(default_factory=dict)


def isr_is(tp: TopicPartition, isr: tuple[int, ...]) -> Condition:
    def check(cluster: Cluster) -> bool:
        return cluster.controller.state(tp).isr == isr

    check.__name__ = f"isr of {tp} is {list(isr)}"
    return check


def appended(tp: TopicPartition, broker: int, records: int) -> Condition:
    def check(cluster: Cluster) -> bool:
        if cluster.acting_leader(tp) != broker:
            return False
        log = cluster.log(broker, tp)
        return log.high_watermark - log.leader_epoch_cache.entries()[-1][1] >= records

    check.__name__ = f"broker {broker} leads {tp} and has appended {records} records in its epoch"
    return check


def hw_behind(broker: int, tp: TopicPartition) -> Condition:
    def check(cluster: Cluster) -> bool:
        log = cluster.log(broker, tp)
        return log.high_watermark < log.log_end_offset

    check.__name__ = f"broker {broker}'s high watermark of {tp} is behind its log end"
    return check


def abort_pending(tp: TopicPartition) -> Condition:
    def check(cluster: Cluster) -> bool:
        return any(p.pending_marker(tp) is False for p in cluster.producers)

    check.__name__ = f"a transactional producer is about to abort its transaction on {tp}"
    return check


def _tp() -> TopicPartition:
    return TopicPartition(EVENTS, 0)


def clean() -> WireScenario:
    return WireScenario("clean", BASE, (), "no faults: every request answered by a healthy cluster")


def unclean_election() -> WireScenario:
    cfg = replace(BASE, unclean_leader_election=True, min_insync_replicas=1)
    stages = (
        Stage(READY, ((0, Isolate(1)),), min_steps=50),  # broker 1's followers stop replicating
        Stage(isr_is(_tp(), (1,)), ((20, PauseProducers()),)),  # acks=1 writes only broker 1 has, then a pause
        Stage(TRIGGER, (
            (0, Crash(1)),  # the only in-sync replica dies: broker 2 is elected uncleanly
            (2, Heal(broker_node(1))),
            (3, ResumeProducers()),  # the new leader takes new records at the offsets the old ones had
            (300, Restart(1)),  # broker 1 comes back as a follower and truncates
        ), min_steps=30),
    )
    return WireScenario("unclean-election", cfg, stages,
                        "acks=1 records only the leader has are read, then the leader dies and a lagging replica is "
                        "elected uncleanly: the records a consumer was served are replaced")


def handoff_truncation() -> WireScenario:
    """`unclean-election`'s faults, meant for `--trigger commit`: group members read the records only broker
    1 has and commit their positions; then broker 1 dies and broker 2 is elected uncleanly, truncating below
    the commits; the members that take the partitions over start from positions the log no longer has
    (librdkafka#5158, sarama#1181, KAFKA-19902). The judge opens an event for each member handed such a
    position by OffsetFetch."""
    base = unclean_election()
    *before, trigger = base.stages
    # 1 s for the members to leave their groups after committing (a LeaveGroup to broker 1 once it died
    # would never be sent); nothing is produced meanwhile.
    later = replace(trigger, faults=tuple((at + 100, fault) for at, fault in trigger.faults))
    return replace(base, name="handoff-truncation", stages=(*before, later),
                   description="members commit positions in records only the leader has and leave; an unclean "
                               "election truncates below the commits, and the members taking over start from them")


def unclean_empty_leader() -> WireScenario:
    """As `unclean-election`, but broker 1 is cut off from the start: the replica elected uncleanly has
    no record at all, so it knows no epoch at or below the consumers' (OffsetsForLeaderEpoch: -1/-1)."""
    cfg = replace(BASE, unclean_leader_election=True, min_insync_replicas=1)
    stages = (
        Stage(lambda cluster: True, ((0, Isolate(1)),)),
        Stage(isr_is(_tp(), (1,)), ((20, PauseProducers()),)),
        Stage(TRIGGER, (
            (0, Crash(1)),
            (2, Heal(broker_node(1))),
            (3, ResumeProducers()),
            (300, Restart(1)),
        ), min_steps=30),
    )
    return WireScenario("unclean-empty-leader", cfg, stages,
                        "broker 1 alone ever has the records; it dies and an empty replica is elected uncleanly: "
                        "the new leader answers OffsetsForLeaderEpoch with -1/-1")


def consecutive_unclean() -> WireScenario:
    """Two unclean elections in a row, the second one out of KIP-320's sight ("pathological cases (e.g.
    multiple consecutive unclean leader elections)", the KIP says, are located approximately or not at all).
    Broker 2 stops replicating first, broker 3 two seconds later: broker 3 holds ~180 epoch-0 records broker 2
    lacks. Broker 1 dies and broker 2 is elected uncleanly (epoch 1): a first divergence, detectable, at
    broker 2's end. The clients read broker 2's epoch-1 records; then broker 2 dies and broker 3 is elected
    uncleanly (epoch 2). Broker 3 never had epoch 1: asked where it ends, it answers with the end of its epoch
    0, above the clients' positions, so a validation finds nothing, while the epoch-1 records the clients
    read were replaced by broker 3's epoch-0 ones. The judge calls that divergence `undetectable`: reported,
    never blamed."""
    cfg = replace(BASE, unclean_leader_election=True, min_insync_replicas=1)
    tp = _tp()
    stages = (
        Stage(READY, ((0, Isolate(2)),), min_steps=50),  # broker 2 stops replicating: out of the ISR
        Stage(isr_is(tp, (1, 3)), ((200, Isolate(3)),)),  # 2 s more of epoch 0 on brokers 1 and 3 only
        Stage(isr_is(tp, (1,)), ((20, PauseProducers()),)),
        Stage(TRIGGER, (
            (0, Crash(1)),  # broker 2 (first in the assignment) is elected uncleanly; broker 3 stays cut off
            (3, ResumeProducers()),
        ), min_steps=30),
        # 20 epoch-1 records on broker 2, far fewer than broker 3's extra ~180
        Stage(appended(tp, 2, 20), ((0, PauseProducers()),)),
        Stage(TRIGGER, (  # the clients have read broker 2's records
            (0, Crash(2)),  # broker 3, the only replica left alive, is elected uncleanly: epoch 2
            (3, ResumeProducers()),
            (300, Heal(broker_node(2))),
            (300, Heal(broker_node(3))),
            (301, Restart(1)),  # both come back as followers of broker 3 and truncate
            (302, Restart(2)),
        ), min_steps=40),
    )
    return WireScenario("consecutive-unclean", cfg, stages,
                        "broker 1 dies and a lagging replica is elected uncleanly; clients read its new records; it "
                        "dies too and a third replica, which never had that epoch, is elected uncleanly: the "
                        "records are replaced where no OffsetsForLeaderEpoch answer can point")


def zombie_leader() -> WireScenario:
    cfg = replace(BASE, unclean_leader_election=True, min_insync_replicas=1)
    stages = (
        Stage(READY, ((0, Isolate(1)),), min_steps=50),
        Stage(isr_is(_tp(), (1,)), ((20, PauseProducers()),)),
        Stage(TRIGGER, (
            (0, Zombie(1)),  # cut off from the controller too: fenced, broker 2 elected uncleanly
            (3, ResumeProducers()),  # broker 1 still believes it leads, serves and takes writes in epoch 0
            (300, Heal(broker_node(1))),  # it hears of the new epoch, becomes a follower and truncates
        ), min_steps=30),
    )
    return WireScenario("zombie-leader", cfg, stages,
                        "the leader loses the controller but keeps serving its old epoch while another replica is "
                        "elected; clients that still ask it read records the new leader never had")


def stale_metadata() -> WireScenario:
    stages = (
        Stage(READY, ((0, StaleMetadata(3, lag_ms=4000)),), min_steps=50),
        Stage(TRIGGER, ((0, PreferredElection(_tp(), 2)),), min_steps=20),
        Stage(lambda c: True, ((0, PreferredElection(_tp(), 3)),), min_steps=100),
        Stage(lambda c: True, ((0, StaleMetadata(3, lag_ms=0)),), min_steps=400),
    )
    return WireScenario("stale-metadata", BASE, stages,
                        "broker 3 serves metadata 4 s late while leadership moves 1 -> 2 -> 3: clients asking it get "
                        "an older leader epoch than they already used")


def lagging_leader() -> WireScenario:
    cfg = replace(BASE, replica_lag_time_max_ms=3000, producers=(-1,))
    b2, b3 = broker_node(2), broker_node(3)
    stages = (
        # 3 cannot fetch from 2
        Stage(TRIGGER, ((0, LinkDelay(b3, b2, drop_rate=1.0, duration_ms=4000)),), min_steps=50),
        # Broker 1 dies just after broker 2 appended records whose commit it has not heard of yet: broker 2
        # leads with a high watermark below its epoch's start, waiting for broker 3 (KIP-207).
        Stage(hw_behind(2, _tp()), ((0, Crash(1)), (200, Restart(1)))),
    )
    return WireScenario("lagging-leader", cfg, stages,
                        "a new leader whose high watermark is behind the old one's until a follower leaves the ISR "
                        "(3 s): ListOffsets(latest) answers OFFSET_NOT_AVAILABLE meanwhile")


def leader_bounce() -> WireScenario:
    cfg = replace(BASE, producers=(-1,))
    stages = (
        Stage(TRIGGER, (
            (0, Crash(1)),  # leader 1 -> 2, clean
            (100, Restart(1)),
            (200, Crash(2)),  # leader 2 -> 3 (or 1)
            (300, Restart(2)),
            (400, PreferredElection(_tp(), 1)),
        ), min_steps=50),
    )
    return WireScenario("leader-bounce", cfg, stages,
                        "leaders crash and restart one after another, clean elections only, under acks=all traffic")


def false_divergence() -> WireScenario:
    """A control: nothing is truncated (acks=all, clean election), yet the new leader answers each client's
    first validation 5 offsets short of the truth. A client cannot tell that answer from a truncation, so
    one that validates goes back (a false alarm, reported, not blamed); no client may be given a divergence
    verdict, as none happened."""
    cfg = replace(BASE, producers=(-1,))
    stages = (
        Stage(TRIGGER, ((0, StaleEpochAnswer(_tp(), 2, 5)), (1, PreferredElection(_tp(), 2))), min_steps=50),
    )
    return WireScenario("false-divergence", cfg, stages,
                        "a clean leader change after which the new leader answers each client's first "
                        "OffsetsForLeaderEpoch 5 offsets below the truth, though nothing was truncated")


def epoch_flap() -> WireScenario:
    """Three clean leader changes 20 ms apart, inside a client's validation round trip: its
    OffsetsForLeaderEpoch reaches a leader already fenced by the next epoch, and a Fetch answer may arrive
    mid-validation (librdkafka#4425: a validation retried with the old epoch forever; #4261: duplicates).
    Nothing is truncated: a client must neither stall, storm, re-read nor skip."""
    cfg = replace(BASE, producers=(-1,))
    tp = _tp()
    stages = (
        Stage(TRIGGER, ((0, PreferredElection(tp, 2)), (2, PreferredElection(tp, 3)), (4, PreferredElection(tp, 1))),
              min_steps=50),
    )
    return WireScenario("epoch-flap", cfg, stages,
                        "leadership moves 1 -> 2 -> 3 -> 1 within 40 ms, clean elections under acks=all traffic")


def log_start_jump() -> WireScenario:
    """A clean leader change whose new leader the clients cannot reach for 1.5 s (`SlowClients`), while the
    simulated producer writes to it and DeleteRecords then moves its log start to its high watermark: each
    client's position is below the log start when its requests are read, and its fetch is answered
    OFFSET_OUT_OF_RANGE. The records below the start are gone by the operator's will, not lost. Correct:
    resume at the log start (auto.offset.reset=earliest; `none` raises); a client that goes to the log end
    skips retained records (franz-go #1416/#1428, Aiven tiered-storage#663). Nothing diverges: validation
    of the old epoch answers the log start (Kafka's `endOffsetFor` of an epoch below the cache's first)."""
    cfg = replace(BASE, producers=(-1,))
    tp = _tp()
    stages = (
        Stage(TRIGGER, (
            (0, SlowClients(2, 1500)),
            (0, PreferredElection(tp, 2)),
            (100, DeleteRecords(tp)),  # 1 s of the producer's records on the new leader, then deleted
        ), min_steps=50),
    )
    return WireScenario("log-start-jump", cfg, stages,
                        "after a clean leader change the clients cannot reach the new leader for 1.5 s; meanwhile "
                        "DeleteRecords moves its log start past their positions: a fetch answered "
                        "OFFSET_OUT_OF_RANGE must resume at the log start")


def marker_truncated() -> WireScenario:
    """KAFKA-20716: an unclean election keeps a transaction's data and loses its ABORT marker. The
    transactional producer's records are replicated (acks=all), then broker 1's followers stop
    replicating just before it writes the ABORT marker, which only broker 1 then holds; the producer has
    its abort acknowledged. Broker 1 dies and broker 2 is elected uncleanly: it holds the transaction open
    (its last stable offset stops there) until the producer's next transaction, whose marker also closes
    the orphaned records, as Kafka's `ProducerStateManager` keeps one ongoing transaction per producer
    from its first offset. So read_committed clients are served records whose transaction was aborted
    (Jepsen's G1a, aborted read): the cluster's doing, not the client's, which no client can detect."""
    cfg = replace(BASE, producers=(-1,), transactional_producers=1, abort_every=3,
                  unclean_leader_election=True, min_insync_replicas=1)
    tp = _tp()
    stages = (
        Stage(READY, (), min_steps=50),
        Stage(abort_pending(tp), ((0, Isolate(1)),)),  # the ABORT marker reaches broker 1 alone
        Stage(lambda c: c.producers[0].pending_marker(tp) is None and c.controller.state(tp).isr == (1,),
              ((0, PauseProducers()),)),
        Stage(TRIGGER, (
            (0, Crash(1)),
            (2, Heal(broker_node(1))),
            (3, ResumeProducers()),  # the next transaction's marker closes the orphaned records too
            (300, Restart(1)),
        ), min_steps=30),
    )
    return WireScenario("marker-truncated", cfg, stages,
                        "an unclean election keeps an aborted transaction's records and loses its ABORT marker: "
                        "the producer's next transaction commits them, and read_committed clients read them")


def idempotent_truncation() -> WireScenario:
    """An idempotent producer's acknowledged tail is truncated (librdkafka#4953, #3584, aiokafka#1017):
    the clients produce to `input` (led by broker 1) with acks=all while its followers copy every batch,
    so they know each producer's sequences; 3 s after the first acknowledgement broker 1 is cut off, the
    ISR shrinks to it alone (min.insync.replicas=1) and it acknowledges sequences no one else has; then it
    dies and broker 2 is elected uncleanly. Broker 2 knows each producer up to what it copied, so the next
    batch is OUT_OF_ORDER_SEQUENCE_NUMBER there (KIP-360). The acknowledged tail is lost by the election;
    what the producer does next is its own: bump its epoch and go on (clean), send the lost records again
    (duplicate, when some were not lost), or stop (fatal). Drivers produce idempotently where the client
    can (`--option` per client: Java and franz-go are by default)."""
    cfg = replace(BASE, unclean_leader_election=True, min_insync_replicas=1)
    stages = (
        Stage(TRIGGER, ((300, Isolate(1)),), min_steps=50),
        Stage(isr_is(TopicPartition(INPUT, 0), (1,)), (
            (100, Crash(1)),  # 1 s of acknowledgements from broker 1 alone
            (102, Heal(broker_node(1))),
            (400, Restart(1)),
        )),
    )
    return WireScenario("idempotent-truncation", cfg, stages,
                        "idempotent producers' acknowledged tail on `input` is lost in an unclean election; the "
                        "new leader knows their sequences only as far as it had copied: OUT_OF_ORDER_SEQUENCE")


FOLLOWER_RACK = "rack-2"  # the client.rack real clients are given in follower-fetch-lag: broker 2's


def follower_fetch_lag() -> WireScenario:
    """KIP-392 (redpanda PR #16146, librdkafka#4620, apache/kafka PR #6731): brokers sit in racks rack-1..3
    and the leaders name a preferred read replica with Kafka's `RackAwareReplicaSelector`, so a consumer with
    `client.rack=rack-2` reads `events` from follower 2. Once the clients are at the log end, broker 2 loses
    power and with it its last 40 unflushed records (`PowerLoss`), restarts at once and cannot fetch from
    the leader for 3 s: a client that still reads from it asks for an offset past its log end and is answered
    OFFSET_OUT_OF_RANGE (Kafka's `LocalLog.read`). Nothing was lost: the leader and broker 3 hold every
    record, and broker 2 is out of the ISR (its restart fenced it), so the leader no longer names it. Correct:
    go back to the leader and fetch the same offset (Java: `clearPreferredReadReplica`); a client that resets
    instead re-reads or skips (the judge's `follower-reset`)."""
    cfg = replace(BASE, producers=(-1,), racks=("rack-1", FOLLOWER_RACK, "rack-3"), rack_aware_selector=True)
    stages = (
        Stage(TRIGGER, (
            (0, PowerLoss(2, _tp(), 40)),
            (1, Restart(2)),
            (1, LinkDelay(broker_node(2), broker_node(1), drop_rate=1.0, duration_ms=3000)),
        ), min_steps=50),
    )
    return WireScenario("follower-fetch-lag", cfg, stages,
                        "a rack-2 consumer reads from follower 2 (KIP-392); broker 2 loses its unflushed tail in a "
                        "power loss and lags for 3 s: its fetches past its log end are OFFSET_OUT_OF_RANGE, and a "
                        "correct client goes back to the leader instead of resetting")


def stale_leader_hint() -> WireScenario:
    """KIP-951 leader hints that are stale (franz-go#1413, AutoMQ#3546): three clean leader changes of `events`-0
    and `input`-0, 1.5 s apart (1 -> 2 -> 3 -> 1, under acks=all traffic), and after each the old leader answers
    the clients that still ask it (a Fetch v16 with the old epoch: FENCED_LEADER_EPOCH; a Produce v10:
    NOT_LEADER_OR_FOLLOWER) for 1 s with a hint naming the third broker: first with the clients' own epoch,
    then with the current epoch (a wrong node), then with an epoch older than theirs. A correct client ignores
    a hint whose epoch is not newer than what it knows and asks for metadata (Java's `Metadata.
    updatePartitionLeadership` keeps the newer epoch); one that follows it goes to a broker that does not
    lead (the judge's `hint-regress`). Nothing is truncated: no client may lose, skip or re-read a record."""
    cfg = replace(BASE, producers=(-1,))
    tps = (_tp(), TopicPartition(INPUT, 0))
    faults: list[tuple[int, Fault]] = []
    for i, (old, new, variant) in enumerate(((1, 2, "own-epoch"), (2, 3, "wrong-node"), (3, 1, "older-epoch"))):
        faults.append((150 * i, StaleLeaderHint(old, tps, variant)))
        faults += [(150 * i, PreferredElection(tp, new)) for tp in tps]
    return WireScenario("stale-leader-hint", cfg, (Stage(TRIGGER, tuple(faults), min_steps=50),),
                        "three clean leader changes 1.5 s apart; after each the old leader gives KIP-951 hints "
                        "naming the third broker with the clients' own epoch, the current one, then an older one")


def transactions() -> WireScenario:
    cfg = replace(BASE, producers=(-1,), transactional_producers=1, abort_every=3)
    return WireScenario("transactions", cfg, (),
                        "no faults; the simulated producer writes `events` in transactions of two batches and aborts "
                        "every third: read_committed clients must skip the aborted records, read_uncommitted ones get "
                        "them all")


SCENARIOS: dict[str, Callable[[], WireScenario]] = {
    "clean": clean,
    "transactions": transactions,
    "unclean-election": unclean_election,
    "unclean-empty-leader": unclean_empty_leader,
    "handoff-truncation": handoff_truncation,
    "consecutive-unclean": consecutive_unclean,
    "zombie-leader": zombie_leader,
    "stale-metadata": stale_metadata,
    "lagging-leader": lagging_leader,
    "leader-bounce": leader_bounce,
    "false-divergence": false_divergence,
    "epoch-flap": epoch_flap,
    "log-start-jump": log_start_jump,
    "marker-truncated": marker_truncated,
    "idempotent-truncation": idempotent_truncation,
    "follower-fetch-lag": follower_fetch_lag,
    "stale-leader-hint": stale_leader_hint,
}


def build(name: str) -> WireScenario:
    try:
        return SCENARIOS[name]()
    except KeyError:
        raise ValueError(f"unknown scenario {name!r}; choose from {', '.join(SCENARIOS)}") from None
