"""A broker process: `epochguard.broker.replica_manager.ReplicaManager` (all protocol rules) wired to the network,
plus what the protocol does not cover: registration and heartbeats with the controller, the metadata
cache it serves to clients, the high-watermark checkpoint, crash and restart.

The partition logs are the broker's disk: in memory (a process crash keeps the page cache) or real
Kafka partition directories under `ClusterConfig.data_dir`, recovered with `PartitionLog.open` on
restart. A restart builds a new ReplicaManager over them, with the high watermarks from the last
checkpoint.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from epochguard.broker.fetcher import FetchState
from epochguard.broker.replica_manager import ReplicaManager
from epochguard.broker.replica_selector import RackAwareReplicaSelector
from epochguard.errors import Errors
from epochguard.protocol.messages import (
    BrokerRegistration,
    FetchRequest,
    FetchResponse,
    LeaderAndIsrPartitionState,
    MetadataRequest,
    MetadataResponse,
    MetadataResponseBroker,
    MetadataResponsePartition,
    MetadataResponseTopic,
)
from epochguard.sim.controller import (
    CONTROLLER,
    BrokerHeartbeat,
    BrokerHeartbeatResponse,
    LeaderAndIsr,
    UpdateMetadata,
    topic_id,
)
from epochguard.sim.events import FetchServed
from epochguard.sim.network import Disconnected, Envelope, broker_node
from epochguard.sim.storage import SimLog
from epochguard.storage.logdir import DEFAULT_CLUSTER_ID
from epochguard.types import TopicPartition

if TYPE_CHECKING:
    from epochguard.sim.context import ActorContext

CONTROLLER_ID = 0  # how the ReplicaManager addresses the controller (brokers are 1..n)


class Broker:
    def __init__(self, broker_id: int, ctx: ActorContext, hosted: list[TopicPartition]) -> None:
        self.id = broker_id
        self.node = broker_node(broker_id)
        self.ctx = ctx
        root = None if ctx.config.data_dir is None else Path(ctx.config.data_dir) / f"broker-{broker_id}"
        self.log_dirs = {tp: None if root is None else root / str(tp) for tp in sorted(hosted)}
        self.logs: dict[TopicPartition, SimLog] = {tp: SimLog(tp, directory=d) for tp, d in self.log_dirs.items()}
        self.hw_checkpoint: dict[TopicPartition, int] = {}
        self.metadata_lag_ms = 0
        self.alive = True
        self.on_delayed_response: Callable[[Any, Any], None] | None = None
        self._cluster_topics = sorted({tp.topic for tp in ctx.config.assignment()})
        self._boot()

    def _boot(self) -> None:
        """Fresh process state (start or restart)."""
        cfg = self.ctx.config
        self.broker_epoch = -1
        self.manager = ReplicaManager(
            self.id,
            protocol=self.ctx.protocol,
            replica_lag_time_max_ms=cfg.replica_lag_time_max_ms,
            min_insync_replicas=cfg.min_insync_replicas,
            controller_id=CONTROLLER_ID,
            logs=dict(self.logs),
            replica_selector=RackAwareReplicaSelector() if cfg.rack_aware_selector else None,
        )
        # Kafka's defaults (1 s backoff, 30 s timeout) are scaled down to the simulation's tick.
        self.manager.fetcher.fetch_backoff_ms = cfg.fetch_backoff_ms
        self.manager.fetcher.request_timeout_ms = cfg.request_timeout_ms
        self.metadata: UpdateMetadata | None = None
        self._metadata_queue: list[tuple[int, UpdateMetadata]] = []
        self._pending: dict[int, tuple[int, Any, int]] = {}  # msg id -> (node id, request, sent at)
        self._truncations_seen = 0
        self._parked: set[TopicPartition] = set()
        self._waiting_produce: dict[int, Envelope] = {}  # id(acks=all request) -> its envelope
        self._next_heartbeat_ms = self.ctx.clock.now_ms
        self._next_checkpoint_ms = self.ctx.clock.now_ms + cfg.hw_checkpoint_interval_ms

    @property
    def now_ms(self) -> int:
        return self.ctx.clock.now_ms

    def leader_epoch(self, tp: TopicPartition) -> int | None:
        """The epoch this broker leads `tp` in, if it believes it is the leader."""
        partition = self.manager.partitions.get(tp)
        return partition.leader_epoch if partition is not None and partition.is_leader else None

    # --- crash / restart -------------------------------------------------------------------------
    def crash(self) -> None:
        self.alive = False
        self.ctx.events.record("crash", self.node, "process killed; log dirs kept")

    def restart(self) -> None:
        """In memory the logs are kept as they were; on disk they are recovered from their directories.
        Either way the high watermarks come from the last checkpoint."""
        for tp, log in self.logs.items():
            directory = self.log_dirs[tp]
            if directory is not None:
                self.logs[tp] = cast(SimLog, SimLog.open(directory, high_watermark=self.hw_checkpoint.get(tp, 0)))
            else:
                log.update_high_watermark(self.hw_checkpoint.get(tp, 0))
        self.alive = True
        self._boot()
        self.ctx.events.record(
            "restart", self.node, "recovered logs: " + ", ".join(
                f"{tp} leo={log.log_end_offset} hw={log.high_watermark}" for tp, log in self.logs.items()),
        )

    # --- network ---------------------------------------------------------------------------------
    def _send(self, node_id: int, request: Any) -> None:
        dst = CONTROLLER if node_id == CONTROLLER_ID else broker_node(node_id)
        msg_id = self.ctx.network.send(self.node, dst, request)
        self._pending[msg_id] = (node_id, request, self.now_ms)

    def receive(self, env: Envelope) -> None:
        if not self.alive:
            return
        msg = env.payload
        now = self.now_ms
        if env.reply_to is not None:
            self._on_reply(env.reply_to, msg, now)
        elif isinstance(msg, LeaderAndIsr):
            for state in msg.partitions:
                self._apply(state)
        elif isinstance(msg, UpdateMetadata):
            self._metadata_queue.append((now + self.metadata_lag_ms, msg))
        elif isinstance(msg, MetadataRequest):
            self.ctx.network.reply(env, self.metadata_response(msg))
        else:
            self._on_request(env, msg, now)

    def _on_reply(self, reply_to: int, msg: Any, now: int) -> None:
        """The answer to a request this broker sent (or the network saying it was lost)."""
        pending = self._pending.pop(reply_to, None)
        if isinstance(msg, Disconnected):
            if pending is not None and not isinstance(pending[1], BrokerHeartbeat):
                self.manager.on_request_failed(pending[0], pending[1], now)
        elif isinstance(msg, BrokerHeartbeatResponse):
            self._on_heartbeat_response(msg)
        elif pending is not None:
            node_id, request, _ = pending
            self.manager.on_response(node_id, request, msg, now)

    def _on_request(self, env: Envelope, msg: Any, now: int) -> None:
        """A request from a follower broker or a client, answered by the ReplicaManager."""
        client = -1 if not env.src.startswith("broker-") else int(env.src.rsplit("-", 1)[1])
        response = self.manager.handle(client, msg, now)
        if response is not None:
            if isinstance(response, FetchResponse) and client < 0:
                self._served(env.src, msg, response)
            self.ctx.network.reply(env, response)
        else:  # an acks=all produce waits for replication
            self._waiting_produce[id(msg)] = env

    def _served(self, consumer: str, request: FetchRequest, response: FetchResponse) -> None:
        offsets = {p.tp: p.fetch_offset for p in request.partitions}
        for data in response.partitions:
            if data.records and data.error_code == Errors.NONE and data.tp in offsets:
                self.ctx.events.publish(FetchServed(consumer, data.tp, self.id, offsets[data.tp]))

    def _apply(self, state: LeaderAndIsrPartitionState) -> None:
        before = self.manager.partitions.get(state.tp)
        was = (before.leader_id, before.leader_epoch) if before is not None else (None, None)
        self.manager.apply_partition_state(state, self.now_ms)
        after = self.manager.partitions.get(state.tp)
        if after is not None:  # resend a lost AlterPartition on the sim's time scale, not after 5 s
            after.alter_partition_retry_ms = self.ctx.config.request_timeout_ms
        if after is not None and after.leader_epoch >= 0 and (after.leader_id, after.leader_epoch) != was:
            role = "leader" if after.is_leader else f"follower of {after.leader_id}"
            log = self.logs[state.tp]
            self.ctx.events.record(
                "role", self.node,
                f"{state.tp}: {role}, epoch {after.leader_epoch} (leo {log.log_end_offset}, hw {log.high_watermark})",
                partition=str(state.tp), leader=after.leader_id, leader_epoch=after.leader_epoch,
            )

    # --- every step ------------------------------------------------------------------------------
    def tick(self) -> None:
        if not self.alive:
            return
        now = self.now_ms
        self._heartbeat(now)
        self._apply_metadata(now)
        self._expire_requests(now)
        for node_id, request in self.manager.poll_requests(now):
            self._send(node_id, request)
        self.deliver_delayed_responses()
        self._report_fetcher(now)
        if now >= self._next_checkpoint_ms:
            self._next_checkpoint_ms = now + self.ctx.config.hw_checkpoint_interval_ms
            self.hw_checkpoint = {tp: log.high_watermark for tp, log in self.logs.items()}

    def deliver_delayed_responses(self) -> None:
        """Answer the acks=all produces (and marker writes) whose ISR has caught up: every step, and at once
        after `Cluster.replicate_at_once`."""
        for _client, request, response in self.manager.poll_responses(self.now_ms):
            env = self._waiting_produce.pop(id(request), None)
            if env is not None:
                self.ctx.network.reply(env, response)
            elif self.on_delayed_response is not None:  # a produce from outside the sim (epochguard serve)
                self.on_delayed_response(request, response)

    def _report_fetcher(self, now: int) -> None:
        """Follower truncations and fenced fetchers, for the timeline."""
        fetcher = self.manager.fetcher
        for t in fetcher.truncations[self._truncations_seen:]:
            self.ctx.events.record(
                "truncate", self.node, f"{t.partition}: log truncated {t.from_offset} -> {t.to_offset} ({t.reason})",
                partition=str(t.partition), from_offset=t.from_offset, to_offset=t.to_offset, reason=t.reason,
            )
        self._truncations_seen = len(fetcher.truncations)
        parked = {tp for tp, s in fetcher.states.items() if s.state == FetchState.PARKED}
        for tp in sorted(parked - self._parked):
            self.ctx.events.record(
                "fenced", self.node, f"{tp}: fetch from broker {fetcher.states[tp].leader_id} fenced "
                f"(epoch {fetcher.states[tp].current_leader_epoch} is stale); waiting for the controller",
                partition=str(tp),
            )
        self._parked = parked

    def _expire_requests(self, now: int) -> None:
        timeout = self.ctx.config.request_timeout_ms
        for msg_id, (node_id, request, sent) in list(self._pending.items()):
            if now - sent >= timeout:
                del self._pending[msg_id]
                if not isinstance(request, BrokerHeartbeat):
                    self.manager.on_request_failed(node_id, request, now)

    # --- controller session ----------------------------------------------------------------------
    def _heartbeat(self, now: int) -> None:
        if now < self._next_heartbeat_ms:
            return
        self._next_heartbeat_ms = now + self.ctx.config.heartbeat_interval_ms
        msg_id = self.ctx.network.send(self.node, CONTROLLER, BrokerHeartbeat(self.id, self.broker_epoch))
        self._pending[msg_id] = (CONTROLLER_ID, BrokerHeartbeat(self.id, self.broker_epoch), now)

    def _on_heartbeat_response(self, response: BrokerHeartbeatResponse) -> None:
        if response.fenced:
            self.broker_epoch = -1  # register again on the next heartbeat
            return
        if response.broker_epoch != self.broker_epoch:
            self.broker_epoch = response.broker_epoch
            self.manager.broker_epoch = response.broker_epoch
            for partition in self.manager.partitions.values():
                partition.broker_epoch = response.broker_epoch

    # --- metadata served to clients --------------------------------------------------------------
    def _apply_metadata(self, now: int) -> None:
        while self._metadata_queue and self._metadata_queue[0][0] <= now:
            _, update = self._metadata_queue.pop(0)
            self.metadata = update
            alive, epochs = set(update.alive_brokers), dict(update.broker_epochs)
            self.manager.update_brokers(
                BrokerRegistration(b, epochs.get(b, -1), fenced=b not in alive, rack=self.ctx.config.rack(b))
                for b in self.ctx.broker_ids
            )

    def metadata_response(self, request: MetadataRequest,
                          listeners: Mapping[int, tuple[str, int]] | None = None) -> MetadataResponse:
        """Kafka's `KafkaApis.handleTopicMetadataRequest` over this broker's metadata cache, which lags
        the controller by `metadata_lag_ms` (the stale-metadata fault). The one Metadata answer, for
        simulated clients and for real ones on the wire (`epochguard.wire.engine`), which pass the
        brokers' `listeners` (host, port); without them every broker is Kafka's default localhost:9092.
        """
        md = self.metadata
        alive = sorted(md.alive_brokers) if md is not None else []
        rack = self.ctx.config.rack
        brokers = tuple(MetadataResponseBroker(b, rack=rack(b)) if listeners is None
                        else MetadataResponseBroker(b, *listeners[b], rack=rack(b)) for b in alive)
        names = self._cluster_topics if request.topics is None else list(request.topics)
        topics = []
        for name in names:
            if name not in self._cluster_topics:
                topics.append(MetadataResponseTopic(name, error_code=Errors.UNKNOWN_TOPIC_OR_PARTITION))
            elif md is None:  # registered, but no UpdateMetadata yet
                topics.append(
                    MetadataResponseTopic(name, topic_id=topic_id(name), error_code=Errors.LEADER_NOT_AVAILABLE))
            else:
                partitions = tuple(
                    MetadataResponsePartition(
                        st.partition_index, st.leader, st.leader_epoch, st.replicas, st.isr,
                        tuple(b for b in st.replicas if b not in alive),
                        Errors.NONE if st.leader >= 0 else Errors.LEADER_NOT_AVAILABLE,
                    )
                    for st in md.partitions if st.topic == name
                )
                topics.append(MetadataResponseTopic(name, partitions, topic_id=topic_id(name)))
        # KRaft brokers name a random alive broker as the controller (clients only use it for admin calls).
        controller = alive[0] if alive else -1
        return MetadataResponse(tuple(topics), brokers, DEFAULT_CLUSTER_ID, controller, version=request.version)
