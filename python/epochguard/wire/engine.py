"""The simulated cluster as Kafka brokers answer real clients, sans-IO: messages in, messages out.

`WireCluster` owns an `epochguard.sim.Cluster` (brokers with divergent logs, controller, the
scenario's simulated producer) and answers the requests real clients send to each broker with the
same state machines the simulator drives: Produce, Fetch, ListOffsets and OffsetsForLeaderEpoch go to
that broker's `ReplicaManager`; OffsetCommit/OffsetFetch and the classic group protocol (JoinGroup,
SyncGroup, Heartbeat, LeaveGroup) and TxnOffsetCommit to the `GroupCoordinator`; InitProducerId with a
transactional id, AddPartitionsToTxn, AddOffsetsToTxn and EndTxn to the one `TransactionCoordinator`,
whose COMMIT/ABORT markers go to each partition's acting leader as WriteTxnMarkers (Kafka's
`TransactionMarkerChannelManager`: real control batches in the logs), an EndTxn answered once they are
all written. What it adds is what Kafka's request
layer (`KafkaApis`, `DelayedFetch`, `DelayedProduce`, the per-connection mute in `SocketServer`)
does around them:

- a broker serves no request before its first metadata update (at start and after a restart): Kafka's
  `BrokerServer` enables request processing only once the initial metadata is published, so no client
  ever sees a broker list without brokers (librdkafka 2.16 would drop every broker it knows for good);
- one request at a time per connection, answered in order; later ones wait in a bounded queue;
- Fetch v13+ names topics by id: `KafkaApis.handleFetchRequest` resolves them from the metadata cache
  and answers an id it does not know UNKNOWN_TOPIC_ID; the answer names each topic by its id;
- KIP-951 leader hints as `KafkaApis` fills them (`getCurrentLeader`): a Produce v10+ partition answered
  NOT_LEADER_OR_FOLLOWER, a Fetch v16+ partition answered NOT_LEADER_OR_FOLLOWER or FENCED_LEADER_EPOCH,
  carries the leader id and epoch this broker knows (its partition state, else its metadata cache), and
  the answer the leader's listener (`NodeEndpoints`) if the metadata cache has it alive; every other
  answer carries none (-1/-1), older versions included;
- Fetch long-polls (up to `max_wait_ms`, virtual time) while no partition has records or an error;
- an acks=all Produce completes when the ReplicaManager says the ISR has it (`on_delayed_response`);
  a client's append completes the followers' fetches at once (`Cluster.replicate_at_once`, Kafka's
  purgatory), so the ISR has it before the next step unless a fault stands between them;
- a crashed broker drops its connections and refuses new ones (a dead process).

Time is the cluster's step counter: nothing here reads a clock, so a recorded run replays exactly
(`epochguard.wire.trace`). The simulated network's randomness never sees client traffic.
"""

from __future__ import annotations

import zlib
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar, Protocol

from epochguard.broker.txn_coordinator import TransactionCoordinator
from epochguard.errors import Errors
from epochguard.protocol.api_versions import ApiKey, ApiVersionsRequest
from epochguard.protocol.messages import (
    AddOffsetsToTxnRequest,
    AddPartitionsToTxnRequest,
    Coordinator,
    EndTxnRequest,
    FetchPartitionData,
    FetchRequest,
    FetchResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    HeartbeatRequest,
    InitProducerIdRequest,
    InitProducerIdResponse,
    JoinGroupRequest,
    LeaderIdAndEpoch,
    LeaveGroupRequest,
    ListOffsetsRequest,
    MetadataRequest,
    NodeEndpoint,
    OffsetCommitRequest,
    OffsetFetchRequest,
    OffsetsForLeaderEpochRequest,
    OffsetsForLeaderEpochResponse,
    ProducePartitionResponse,
    ProduceRequest,
    ProduceResponse,
    SyncGroupRequest,
    TxnOffsetCommitRequest,
    WriteTxnMarkerResult,
    WriteTxnMarkersRequest,
    WriteTxnMarkersResponse,
)
from epochguard.sim.cluster import Cluster
from epochguard.sim.controller import topic_id
from epochguard.sim.faults import Fault
from epochguard.types import TopicPartition
from epochguard.wire.scenarios import SlowClients, StaleEpochAnswer, StaleLeaderHint, WireScenario

__all__ = ["WireCluster", "Connection", "Observer", "MAX_QUEUED_REQUESTS"]

MAX_QUEUED_REQUESTS = 64  # per connection; the socket layer stops reading beyond it
_BROKER_REPLICA_CONSUMER = -1
FETCH_TOPIC_IDS_VERSION = 13  # KIP-516: topics by id
FETCH_LEADER_HINT_VERSION = 16  # KIP-951
PRODUCE_LEADER_HINT_VERSION = 10
_FETCH_HINT_ERRORS = (Errors.NOT_LEADER_OR_FOLLOWER, Errors.FENCED_LEADER_EPOCH)
_NO_HINT = LeaderIdAndEpoch()


class Header(Protocol):
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None


class Observer(Protocol):
    """Sees every exchange and fault, in order (the judge, the trigger, the trace)."""

    def on_exchange(self, conn: Connection, header: Any, request: Any, response: Any, applied_step: int,
                    step: int) -> None: ...

    def on_fault(self, fault: Fault, step: int) -> None: ...

    def on_step(self, wire: WireCluster) -> None: ...


@dataclass(eq=False)
class Connection:
    id: int
    broker_id: int
    client_id: str = ""
    software_name: str = ""
    software_version: str = ""
    queue: deque[tuple[Any, Any]] = field(default_factory=deque)  # (header, request) not yet applied
    inflight: deque[_Waiting] = field(default_factory=deque)  # applied, answered in this order
    closed: bool = False

    @property
    def software(self) -> str:
        return f"{self.software_name} {self.software_version}".strip() or "unknown"


@dataclass(eq=False)
class _Waiting:
    conn: Connection
    header: Any
    request: Any
    applied_step: int
    deadline_ms: int = 0
    done: bool = False
    response: Any = None


_NO_ANSWER = object()  # acks=0: Kafka sends nothing back
_Handler = Callable[["WireCluster", Connection, _Waiting], None]


class WireCluster:
    """Every simulated broker's request entry point. `handle` takes a decoded request; answers come out
    of `drain()` as (connection, header, response) in the order they were produced."""

    def __init__(self, scenario: WireScenario, seed: int, addresses: dict[int, tuple[str, int]]) -> None:
        self.scenario = scenario
        self.seed = seed
        self.addresses = dict(addresses)
        self.cluster = Cluster(scenario.config, seed, "kip-320")
        self.all_partitions = tuple(sorted(scenario.config.assignment()))
        self.topic_names = {topic_id(t): t for t in sorted({tp.topic for tp in self.all_partitions})}
        self._topic_ids = {name: tid for tid, name in self.topic_names.items()}
        self.connections: dict[int, Connection] = {}
        self.observers: list[Observer] = []
        self.outbox: deque[tuple[Connection, Any, Any]] = deque()
        self.closing: deque[Connection] = deque()
        self._fetches: list[_Waiting] = []
        self._delayed: dict[int, _Waiting] = {}  # id(request) -> an acks=all Produce, a JoinGroup, a SyncGroup
        self._next_conn = 0
        self._next_producer_id = 1000
        self._stale_epoch_answers: dict[tuple[int, Any], int] = {}  # (broker, tp) -> lag (StaleEpochAnswer)
        self._lied_to: set[tuple[str, Any]] = set()  # (client id, tp) already given its stale answer
        self._slow_until: dict[int, int] = {}  # broker -> until when it reads no client request (SlowClients)
        self._stale_hints: dict[int, tuple[StaleLeaderHint, int]] = {}  # broker -> (its lie, until when)
        for broker in self.cluster.brokers.values():
            broker.on_delayed_response = self._on_delayed_response
        self.groups = self.cluster.coordinator.coordinator
        self.groups.groups.on_delayed_response = self._on_delayed_response
        self.transactions = TransactionCoordinator(self._allocate_producer_id)
        self.transactions.on_delayed_response = self._on_delayed_response
        self.transactions.on_complete = self.groups.complete_txn
        # WriteTxnMarkers requests a leader has not answered, by id() (kept alive here: ids are not reused)
        self._marker_writes: dict[int, WriteTxnMarkersRequest] = {}

    # --- time ------------------------------------------------------------------------------------
    @property
    def step_no(self) -> int:
        return self.cluster.timeline.step

    @property
    def now_ms(self) -> int:
        return self.cluster.clock.now_ms

    def step(self) -> None:
        self.cluster.step()
        self.groups.poll(self.now_ms)
        self.transactions.poll(self.now_ms)
        self._write_markers()
        for conn in list(self.connections.values()):
            if not self.cluster.brokers[conn.broker_id].alive:
                self.close(conn)
            elif conn.queue and not conn.inflight:
                self._run_queue(conn)  # requests held until the broker had metadata
        self._poll_fetches()
        for obs in self.observers:
            obs.on_step(self)

    def fire(self, fault: Fault) -> None:
        """Apply a fault now (between steps), as the cluster's own schedule would."""
        self.cluster.timeline.record("fault", "cluster", fault.describe(), fault=type(fault).__name__)
        fault.apply(self.cluster)
        if isinstance(fault, StaleEpochAnswer):  # a lie of the request layer, not of the cluster's state
            self._stale_epoch_answers[(fault.broker, fault.tp)] = fault.lag
        elif isinstance(fault, SlowClients):
            self._slow_until[fault.broker] = self.now_ms + fault.duration_ms
        elif isinstance(fault, StaleLeaderHint):
            self._stale_hints[fault.broker] = (fault, self.now_ms + fault.duration_ms)
        for obs in self.observers:
            obs.on_fault(fault, self.step_no)
        for conn in list(self.connections.values()):
            if not self.cluster.brokers[conn.broker_id].alive:
                self.close(conn)

    # --- connections -----------------------------------------------------------------------------
    def connect(self, broker_id: int) -> Connection | None:
        """A new client connection to a broker; None if that broker process is down (refused)."""
        if not self.cluster.brokers[broker_id].alive:
            return None
        self._next_conn += 1
        conn = Connection(self._next_conn, broker_id)
        self.connections[conn.id] = conn
        return conn

    def close(self, conn: Connection) -> None:
        """The connection is gone (client closed it, or its broker died): drop what it waits for."""
        if conn.closed:
            return
        conn.closed = True
        conn.queue.clear()
        conn.inflight.clear()
        self.connections.pop(conn.id, None)
        self._fetches = [w for w in self._fetches if w.conn is not conn]
        for key in [k for k, w in self._delayed.items() if w.conn is conn]:
            del self._delayed[key]
        self.closing.append(conn)

    def drain(self) -> list[tuple[Connection, Any, Any]]:
        out = list(self.outbox)
        self.outbox.clear()
        return out

    # --- requests --------------------------------------------------------------------------------
    def submit(self, conn: Connection, header: Any, request: Any) -> None:
        """Queue a decoded request; it is applied when the ones before it on `conn` are answered."""
        if conn.closed:
            return
        conn.queue.append((header, request))
        self._run_queue(conn)

    def _run_queue(self, conn: Connection) -> None:
        """One request at a time per connection, as Kafka's muted channel; except that produces may
        follow produces still waiting for their acks=all (appended in order, answered in order), so
        a pipelining producer is not held to one ISR round trip per request. Nothing runs on a broker
        without metadata yet (see the module docstring), nor while it reads no client request
        (`SlowClients`); `step` runs the queue again."""
        if self.cluster.brokers[conn.broker_id].metadata is None:
            return
        if self.now_ms < self._slow_until.get(conn.broker_id, 0):
            return
        while conn.queue and not conn.closed:
            if conn.inflight and not (isinstance(conn.queue[0][1], ProduceRequest)
                                      and all(isinstance(w.request, ProduceRequest) for w in conn.inflight)):
                return
            header, request = conn.queue.popleft()
            waiting = _Waiting(conn, header, request, self.step_no)
            conn.inflight.append(waiting)
            self._apply(conn, waiting)

    def _apply(self, conn: Connection, waiting: _Waiting) -> None:
        if waiting.header.client_id is not None:
            conn.client_id = waiting.header.client_id
        request = waiting.request
        for types, handler in self._HANDLERS:
            if isinstance(request, types):
                handler(self, conn, waiting)
                return
        raise TypeError(f"no handler for {type(request).__name__}")

    def _handle_by_manager(self, conn: Connection, waiting: _Waiting) -> Any:
        """What the broker's ReplicaManager answers (None while an acks=all produce waits)."""
        manager = self.cluster.brokers[conn.broker_id].manager
        return manager.handle(_BROKER_REPLICA_CONSUMER, waiting.request, self.now_ms)

    def _on_api_versions(self, conn: Connection, waiting: _Waiting) -> None:
        request: ApiVersionsRequest = waiting.request
        if request.client_software_name:
            conn.software_name = request.client_software_name
            conn.software_version = request.client_software_version
        self._answer(waiting, self._handle_by_manager(conn, waiting))

    def _on_metadata(self, conn: Connection, waiting: _Waiting) -> None:
        broker = self.cluster.brokers[conn.broker_id]
        self._answer(waiting, broker.metadata_response(waiting.request, self.addresses))

    def _on_fetch(self, conn: Connection, waiting: _Waiting) -> None:
        request: FetchRequest = waiting.request
        if request.version >= FETCH_TOPIC_IDS_VERSION:
            # The names from the ids, once: the judge and the long poll see the resolved request.
            request = waiting.request = self._resolve_topic_ids(request)
        waiting.deadline_ms = self.now_ms + max(0, request.max_wait_ms)
        response = self._fetch_answer(conn, request)
        if self._fetch_ready(request, response) or request.max_wait_ms <= 0:
            self._answer(waiting, response)
        else:
            self._fetches.append(waiting)

    def _resolve_topic_ids(self, request: FetchRequest) -> FetchRequest:
        """`FetchRequest.fetchData(topicNames)`: each partition's topic from its id (`metadataCache.
        topicIdsToNames`); an unknown id leaves the topic "", answered UNKNOWN_TOPIC_ID. Forgotten
        topics, named by id too, are resolved alike (unknown ones dropped: no session holds them)."""
        parts = tuple(replace(p, topic=self.topic_names.get(p.topic_id or "", "")) for p in request.partitions)
        forgotten = tuple(TopicPartition(self.topic_names[tp.topic], tp.partition)
                          for tp in request.forgotten_topics if tp.topic in self.topic_names)
        return replace(request, partitions=parts, forgotten_topics=forgotten)

    def _fetch_answer(self, conn: Connection, request: FetchRequest) -> Any:
        """The ReplicaManager's answer for the partitions whose topic is known, UNKNOWN_TOPIC_ID for the
        rest (`KafkaApis.handleFetchRequest`'s `erroneous`), in the request's order."""
        manager = self.cluster.brokers[conn.broker_id].manager
        if all(p.topic for p in request.partitions):
            return manager.handle(_BROKER_REPLICA_CONSUMER, request, self.now_ms)
        known = tuple(p for p in request.partitions if p.topic)
        answered = manager.handle(_BROKER_REPLICA_CONSUMER, replace(request, partitions=known), self.now_ms)
        if not isinstance(answered, FetchResponse):
            return answered
        by_tp = {d.tp: d for d in answered.partitions}
        parts = tuple(by_tp[p.tp] if p.topic else FetchPartitionData("", p.partition_index, Errors.UNKNOWN_TOPIC_ID,
                                                                     topic_id=p.topic_id)
                      for p in request.partitions)
        return replace(answered, partitions=parts)

    def _kafka_apis(self, conn: Connection, header: Any, response: Any) -> Any:
        """What `KafkaApis` adds to a Fetch or Produce answer: topic ids (Fetch v13+), and the leader hints
        of KIP-951 (`getCurrentLeader`) where Kafka gives them, none elsewhere."""
        version = header.api_version
        if isinstance(response, FetchResponse):
            ids = self._topic_ids
            by_id = version >= FETCH_TOPIC_IDS_VERSION
            hints = version >= FETCH_LEADER_HINT_VERSION
            parts, changed = [], False
            nodes: dict[int, NodeEndpoint] = {}
            for d in response.partitions:
                hinted = hints and d.error_code in _FETCH_HINT_ERRORS
                hint = self._hint(conn.broker_id, d.tp, nodes) if hinted else _NO_HINT
                tid = (d.topic_id or ids.get(d.topic)) if by_id else None
                if hint != d.current_leader or tid != d.topic_id:
                    d, changed = replace(d, current_leader=hint, topic_id=tid), True
                parts.append(d)
            if not changed and not nodes and not response.node_endpoints:
                return response  # the common answer: nothing to add (no copy on the hot path)
            return replace(response, partitions=tuple(parts), node_endpoints=tuple(nodes[n] for n in sorted(nodes)))
        if isinstance(response, ProduceResponse):
            hints = version >= PRODUCE_LEADER_HINT_VERSION
            produced: list[ProducePartitionResponse] = []
            nodes = {}
            for r in response.partitions:
                hinted = hints and r.error_code == Errors.NOT_LEADER_OR_FOLLOWER
                hint = self._hint(conn.broker_id, r.tp, nodes) if hinted else _NO_HINT
                produced.append(r if r.current_leader == hint else replace(r, current_leader=hint))
            if not nodes and not response.node_endpoints and all(
                    a is b for a, b in zip(produced, response.partitions, strict=True)):
                return response
            return replace(response, partitions=tuple(produced), node_endpoints=tuple(nodes[n] for n in sorted(nodes)))
        return response

    def _hint(self, broker_id: int, tp: Any, nodes: dict[int, NodeEndpoint]) -> LeaderIdAndEpoch:
        """The leader hint `broker_id` gives for `tp` (`getCurrentLeader`, or the scenario's lie), its
        listener added to `nodes` (the answer's `NodeEndpoints`) when it has one."""
        hint, node = self._lie(broker_id, tp, *self._current_leader(broker_id, tp))
        if node is not None:
            nodes[node.node_id] = node
        return hint

    def _lie(self, broker_id: int, tp: Any, hint: LeaderIdAndEpoch,
             node: NodeEndpoint | None) -> tuple[LeaderIdAndEpoch, NodeEndpoint | None]:
        """A stale hint in place of `hint` while `broker_id` is armed with a `StaleLeaderHint` for `tp`: the
        third broker (neither this one nor the leader) with the variant's epoch, and that broker's listener."""
        armed = self._stale_hints.get(broker_id)
        if armed is None or hint.leader_id < 0 or hint.leader_epoch < 0:
            return hint, node
        fault, until = armed
        if self.now_ms >= until or tp not in fault.tps:
            return hint, node
        others = sorted(b for b in self.addresses if b not in (broker_id, hint.leader_id))
        if not others:
            return hint, node
        named = others[0]
        epoch = {"own-epoch": hint.leader_epoch - 1, "older-epoch": hint.leader_epoch - 2,
                 "wrong-node": hint.leader_epoch}[fault.variant]
        host, port = self.addresses[named]
        return LeaderIdAndEpoch(named, max(0, epoch)), NodeEndpoint(named, host, port, self.scenario.config.rack(named))

    def _current_leader(self, broker_id: int, tp: Any) -> tuple[LeaderIdAndEpoch, NodeEndpoint | None]:
        """`KafkaApis.getCurrentLeader`: the leader id and epoch of the broker's own partition state if it
        hosts `tp`, else of its metadata cache; the leader's listener if the cache has it alive."""
        broker = self.cluster.brokers[broker_id]
        partition = broker.manager.partitions.get(tp)
        md = broker.metadata
        if partition is not None:
            leader_id = -1 if partition.leader_id is None else partition.leader_id
            leader = LeaderIdAndEpoch(leader_id, partition.leader_epoch)
        else:
            state = next((st for st in (md.partitions if md is not None else ()) if st.tp == tp), None)
            leader = LeaderIdAndEpoch() if state is None else LeaderIdAndEpoch(state.leader, state.leader_epoch)
        node = None
        if md is not None and leader.leader_id in md.alive_brokers and leader.leader_id in self.addresses:
            host, port = self.addresses[leader.leader_id]
            node = NodeEndpoint(leader.leader_id, host, port, self.scenario.config.rack(leader.leader_id))
        return leader, node

    def _on_produce(self, conn: Connection, waiting: _Waiting) -> None:
        request: ProduceRequest = waiting.request
        response = self._handle_by_manager(conn, waiting)
        if response is None:  # acks=all: the ISR has not got it yet
            self._delayed[id(request)] = waiting
        # The append completes the followers' parked fetches at once (as Kafka's purgatory does), which
        # may move the high watermark and answer this produce and others waiting (`_on_delayed_response`).
        self.cluster.replicate_at_once(conn.broker_id, [p.tp for p in request.partitions])
        if response is not None:
            self._answer(waiting, _NO_ANSWER if request.acks == 0 else response)
        self._poll_fetches()  # new records may complete long polls (once the HW moves)

    def _on_offsets(self, conn: Connection, waiting: _Waiting) -> None:
        response = self._handle_by_manager(conn, waiting)
        if self._stale_epoch_answers and isinstance(response, OffsetsForLeaderEpochResponse):
            response = self._stale(conn, response)
        self._answer(waiting, response)

    def _stale(self, conn: Connection, response: OffsetsForLeaderEpochResponse) -> OffsetsForLeaderEpochResponse:
        """Each client's first answer for an armed partition, `lag` short (StaleEpochAnswer)."""
        parts = []
        for p in response.partitions:
            lag = self._stale_epoch_answers.get((conn.broker_id, p.tp))
            key = (conn.client_id, p.tp)
            if lag is not None and p.error_code == Errors.NONE and p.end_offset >= 0 and key not in self._lied_to:
                self._lied_to.add(key)
                start = self.cluster.log(conn.broker_id, p.tp).log_start_offset
                p = replace(p, end_offset=max(start, p.end_offset - lag))
            parts.append(p)
        return replace(response, partitions=tuple(parts))

    def _on_offset_commit_or_fetch(self, conn: Connection, waiting: _Waiting) -> None:
        self._answer(waiting, self.groups.handle(_BROKER_REPLICA_CONSUMER, waiting.request, self.now_ms))

    def _on_group_membership(self, conn: Connection, waiting: _Waiting) -> None:
        request = waiting.request
        response = self.groups.handle(_BROKER_REPLICA_CONSUMER, request, self.now_ms, conn.client_id)
        if response is None:  # waits for the other members (JoinGroup) or the leader (SyncGroup)
            self._delayed[id(request)] = waiting
        else:
            self._answer(waiting, response)

    def _on_find_coordinator(self, conn: Connection, waiting: _Waiting) -> None:
        # Every broker hosts the one (never failing) group state, but each group has one coordinator, as
        # Kafka's (the leader of the group's __consumer_offsets partition): the live brokers in order from
        # crc32(key). Answering "the broker asked" sent a client that asked a second broker mid-join to a
        # second coordinator, and its first JoinGroup stayed pending at the first.
        request: FindCoordinatorRequest = waiting.request
        alive = sorted(b for b, broker in self.cluster.brokers.items() if broker.alive)
        keys = request.coordinator_keys or (request.key,)
        coordinators = []
        for key in keys:
            node = alive[zlib.crc32(key.encode()) % len(alive)] if alive else conn.broker_id
            host, port = self.addresses[node]
            coordinators.append(Coordinator(key, node, host, port))
        self._answer(waiting, FindCoordinatorResponse(tuple(coordinators)))

    def _allocate_producer_id(self) -> int:
        self._next_producer_id += 1
        return self._next_producer_id

    def _on_init_producer_id(self, conn: Connection, waiting: _Waiting) -> None:
        request: InitProducerIdRequest = waiting.request
        if request.transactional_id is None:  # idempotent: a fresh id, no coordinator state
            self._answer(waiting, InitProducerIdResponse(producer_id=self._allocate_producer_id(), producer_epoch=0))
        else:
            self._on_transaction(conn, waiting)

    def _on_transaction(self, conn: Connection, waiting: _Waiting) -> None:
        response = self.transactions.handle(waiting.request, self.now_ms)
        if response is None:  # an EndTxn waiting for its markers
            self._delayed[id(waiting.request)] = waiting
        self._write_markers()
        if response is not None:
            self._answer(waiting, response)

    def _write_markers(self) -> None:
        """The coordinator's markers as WriteTxnMarkers to each partition's acting leader (none: retried on
        a later step); the leader answers once the ISR has them, and its followers fetch them at once."""
        by_leader: dict[int, list[Any]] = {}
        for marker in self.transactions.markers_to_write(self.now_ms):
            leader = self.cluster.acting_leader(marker.tp)
            if leader is None or not self.cluster.brokers[leader].alive:
                self.transactions.on_markers_written(
                    (WriteTxnMarkerResult(marker.producer_id, marker.topic, marker.partition_index,
                                          Errors.NOT_LEADER_OR_FOLLOWER),))
                continue
            by_leader.setdefault(leader, []).append(marker)
        for leader, markers in sorted(by_leader.items()):
            request = WriteTxnMarkersRequest(tuple(markers))
            manager = self.cluster.brokers[leader].manager
            self._marker_writes[id(request)] = request
            response = manager.handle(_BROKER_REPLICA_CONSUMER, request, self.now_ms)
            self.cluster.replicate_at_once(leader, [m.tp for m in markers])
            if response is not None:
                self._on_delayed_response(request, response)
        self._poll_fetches()

    def _on_markers_written(self, request: Any, response: WriteTxnMarkersResponse) -> None:
        del self._marker_writes[id(request)]
        self.transactions.on_markers_written(response.partitions)

    # Request type(s) -> handler, tried in order (isinstance, as the request layer's match on the API key).
    _HANDLERS: ClassVar[tuple[tuple[type | tuple[type, ...], _Handler], ...]] = (
        (ApiVersionsRequest, _on_api_versions),
        (MetadataRequest, _on_metadata),
        (FetchRequest, _on_fetch),
        (ProduceRequest, _on_produce),
        ((ListOffsetsRequest, OffsetsForLeaderEpochRequest), _on_offsets),
        ((OffsetCommitRequest, OffsetFetchRequest, TxnOffsetCommitRequest), _on_offset_commit_or_fetch),
        ((JoinGroupRequest, SyncGroupRequest, HeartbeatRequest, LeaveGroupRequest), _on_group_membership),
        (FindCoordinatorRequest, _on_find_coordinator),
        (InitProducerIdRequest, _on_init_producer_id),
        ((AddPartitionsToTxnRequest, AddOffsetsToTxnRequest, EndTxnRequest), _on_transaction),
    )

    def _answer(self, waiting: _Waiting, response: Any) -> None:
        conn = waiting.conn
        if conn.closed:
            return
        waiting.done, waiting.response = True, self._kafka_apis(conn, waiting.header, response)
        while conn.inflight and conn.inflight[0].done:
            w = conn.inflight.popleft()
            if w.response is _NO_ANSWER:
                continue
            self.outbox.append((conn, w.header, w.response))
            for obs in self.observers:
                obs.on_exchange(conn, w.header, w.request, w.response, w.applied_step, self.step_no)
        self._run_queue(conn)

    # --- delayed operations ----------------------------------------------------------------------
    @staticmethod
    def _fetch_ready(request: FetchRequest, response: Any) -> bool:
        """Kafka's DelayedFetch completes on an error, a diverging epoch or a preferred read replica
        (`ReplicaManager.fetchMessages`), or once min_bytes of records are there."""
        if not isinstance(response, FetchResponse) or response.error_code != Errors.NONE:
            return True
        size = 0
        for p in response.partitions:
            if p.error_code != Errors.NONE or p.diverging_epoch is not None or p.preferred_read_replica >= 0:
                return True
            size += len(p.records)
        return size > 0 and size >= request.min_bytes

    def _poll_fetches(self) -> None:
        if not self._fetches:
            return
        now = self.now_ms
        pending, self._fetches = self._fetches, []
        for w in pending:  # an answer may start the connection's next request, which may wait in turn
            if w.conn.closed:
                continue
            response = self._fetch_answer(w.conn, w.request)
            if self._fetch_ready(w.request, response) or now >= w.deadline_ms:
                self._answer(w, response)
            else:
                self._fetches.append(w)

    def _on_delayed_response(self, request: Any, response: Any) -> None:
        if self._marker_writes.get(id(request)) is request:
            self._on_markers_written(request, response)
            return
        waiting = self._delayed.pop(id(request), None)
        if waiting is not None:
            self._answer(waiting, response)

    # --- queries ---------------------------------------------------------------------------------
    def leader_log(self, tp: Any) -> Any:
        leader = self.cluster.acting_leader(tp)
        return None if leader is None else self.cluster.log(leader, tp)

    def ready(self) -> bool:
        return all(self.cluster.acting_leader(tp) is not None for tp in self.all_partitions)


def api_key_of(request: Any) -> int:
    return _API_KEYS[type(request)]


_API_KEYS: dict[type, int] = {
    ProduceRequest: ApiKey.PRODUCE,
    FetchRequest: ApiKey.FETCH,
    ListOffsetsRequest: ApiKey.LIST_OFFSETS,
    MetadataRequest: ApiKey.METADATA,
    OffsetCommitRequest: ApiKey.OFFSET_COMMIT,
    OffsetFetchRequest: ApiKey.OFFSET_FETCH,
    FindCoordinatorRequest: ApiKey.FIND_COORDINATOR,
    ApiVersionsRequest: ApiKey.API_VERSIONS,
    InitProducerIdRequest: ApiKey.INIT_PRODUCER_ID,
    OffsetsForLeaderEpochRequest: ApiKey.OFFSET_FOR_LEADER_EPOCH,
    JoinGroupRequest: ApiKey.JOIN_GROUP,
    SyncGroupRequest: ApiKey.SYNC_GROUP,
    HeartbeatRequest: ApiKey.HEARTBEAT,
    LeaveGroupRequest: ApiKey.LEAVE_GROUP,
    AddPartitionsToTxnRequest: ApiKey.ADD_PARTITIONS_TO_TXN,
    AddOffsetsToTxnRequest: ApiKey.ADD_OFFSETS_TO_TXN,
    EndTxnRequest: ApiKey.END_TXN,
    TxnOffsetCommitRequest: ApiKey.TXN_OFFSET_COMMIT,
}

