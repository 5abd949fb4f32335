"""A consumer application: the `epochguard.client.consumer.Consumer` state machine (positions, validation,
resets, fetches: every rule) driven over the network. The application polls every step, hands each
record to the event sink, and reports the truncations and resets the state machine recorded."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from epochguard.client.consumer import Consumer as ConsumerMachine
from epochguard.client.consumer import FetchState
from epochguard.client.metadata import ClientMetadata
from epochguard.errors import (
    LogTruncationError,
    NoOffsetForPartitionError,
    OffsetOutOfRangeError,
)
from epochguard.protocol.messages import FetchResponse, MetadataResponse, OffsetCommitRequest
from epochguard.sim.coordinator import COORDINATOR, COORDINATOR_ID, GROUP_ID
from epochguard.sim.events import (
    ClientRestarted,
    Consumed,
    ConsumerResumed,
    MetadataAccepted,
    ResetReported,
    TruncationReported,
)
from epochguard.sim.network import Disconnected, Envelope, broker_node
from epochguard.types import ConsumerRecord, IsolationLevel, TopicPartition, epoch_or_sentinel

if TYPE_CHECKING:
    from epochguard.sim.context import ActorContext


@dataclass(frozen=True, slots=True)
class ConsumedRecord:
    """One record delivered to a consumer application (what the demo's consumed-records table holds)."""

    consumer: str
    topic: str
    partition: int
    offset: int
    leader_epoch: int | None
    key: bytes | None
    value: bytes | None
    broker: int
    step: int

    def to_json(self) -> dict[str, Any]:
        return {
            "consumer": self.consumer, "topic": self.topic, "partition": self.partition, "offset": self.offset,
            "leader_epoch": self.leader_epoch,
            "key": None if self.key is None else self.key.decode("utf-8", "replace"),
            "value": None if self.value is None else self.value.decode("utf-8", "replace"),
            "broker": self.broker, "step": self.step,
        }


class Consumer:
    """The application around one `ConsumerMachine`: it polls every step, commits its positions (with
    their epochs) every `commit_interval_ms` to the group coordinator, and can be restarted: a new
    machine resumes from the committed offsets, as a restarted consumer process would."""

    def __init__(self, name: str, ctx: ActorContext, *, read_committed: bool = False) -> None:
        self.name = name
        self.read_committed = read_committed
        self.ctx = ctx
        self.consumed: list[ConsumedRecord] = []
        self._resuming: set[TopicPartition] = set()  # restarted, nothing delivered yet
        self._commit_steps: dict[tuple[TopicPartition, int, int], int] = {}  # (tp, offset, epoch) -> step sent
        self._start()

    def _start(self) -> None:
        cfg = self.ctx.config
        metadata = ClientMetadata(protocol=self.ctx.protocol, topics=[cfg.topic],
                                  refresh_backoff_ms=cfg.metadata_backoff_ms,
                                  metadata_max_age_ms=cfg.metadata_max_age_ms)
        self.machine = ConsumerMachine(
            bootstrap=self.ctx.broker_ids,
            group_id=GROUP_ID,
            coordinator_id=COORDINATOR_ID,
            reset_policy=cfg.auto_offset_reset,
            protocol=self.ctx.protocol,
            retry_backoff_ms=cfg.retry_backoff_ms,
            request_timeout_ms=cfg.request_timeout_ms,
            metadata=metadata,
            isolation_level=IsolationLevel.READ_COMMITTED if self.read_committed else IsolationLevel.READ_UNCOMMITTED,
        )
        self.machine.assign(self.ctx.topic_partitions)
        self._sent: dict[int, tuple[int, Any]] = {}  # msg id -> (node, request)
        self._served_by: dict[TopicPartition, int] = {}
        self._truncations_seen = 0
        self._resets_seen = 0
        self._next_commit_ms = self.ctx.clock.now_ms + cfg.commit_interval_ms

    def restart(self) -> None:
        """The process dies (uncommitted progress is lost) and starts again from the committed offsets."""
        self._start()
        self._resuming = set(self.ctx.topic_partitions)
        self.ctx.events.publish(ClientRestarted(self.name))
        self.ctx.events.record("restart", self.name, "consumer restarted; resuming from committed offsets")

    @property
    def metadata(self) -> ClientMetadata:
        return self.machine.metadata

    def receive(self, env: Envelope) -> None:
        sent = self._sent.pop(env.reply_to, None) if env.reply_to is not None else None
        if sent is None:
            return
        node, request = sent
        now = self.ctx.clock.now_ms
        if isinstance(env.payload, Disconnected):
            self.machine.on_request_failed(node, request, now)
            return
        if isinstance(env.payload, FetchResponse):
            for data in env.payload.partitions:
                if data.records:
                    self._served_by[data.tp] = node
        self.machine.on_response(node, request, env.payload, now)
        if isinstance(env.payload, MetadataResponse):
            for tp in self.ctx.topic_partitions:
                meta = self.metadata.partition_metadata(tp)
                if meta is not None:
                    self.ctx.events.publish(MetadataAccepted(self.name, tp, meta.leader_id, meta.leader_epoch))

    def tick(self) -> None:
        now = self.ctx.clock.now_ms
        self._resume()
        if now >= self._next_commit_ms:
            self._next_commit_ms = now + self.ctx.config.commit_interval_ms
            self.machine.commit()
        deadline = self.machine.next_deadline_ms()
        due = deadline is not None and deadline <= now  # else nothing to send: skip the round
        for node, request in self.machine.poll_requests(now) if due else ():
            dst = COORDINATOR if node == COORDINATOR_ID else broker_node(node)
            if isinstance(request, OffsetCommitRequest):
                for p in request.partitions:
                    self._commit_steps[(p.tp, p.committed_offset, p.committed_leader_epoch)] = self.ctx.events.step
            msg_id = self.ctx.network.send(self.name, dst, request)
            self._sent[msg_id] = (node, request)
        try:
            records = self.machine.poll(now)
        except LogTruncationError as e:  # reset policy "none": the application decides where to go on
            self._report()
            for tp in e.offset_out_of_range_partitions:
                divergent = e.divergent_offsets.get(tp)  # absent where the divergence point is unknown
                if divergent is not None:
                    self.machine.seek(tp, divergent)
                else:
                    self.machine.seek_to_beginning(tp)
            return
        except (OffsetOutOfRangeError, NoOffsetForPartitionError) as e:
            self._report()
            self.ctx.events.record("error", self.name, f"{type(e).__name__}: {e}; seeking to the beginning")
            for tp in self.ctx.topic_partitions:
                self.machine.seek_to_beginning(tp)
            return
        self._report()
        step = self.ctx.events.step
        for tp in sorted(records.partitions()):
            batch: list[ConsumerRecord] = list(records[tp])
            broker = self._served_by.get(tp, -1)
            for record in batch:
                self.consumed.append(ConsumedRecord(self.name, record.topic, record.partition, record.offset,
                                                    record.leader_epoch, record.key, record.value, broker, step))
                self.ctx.events.publish(Consumed(self.name, record, broker, self.read_committed))
            self.ctx.events.record(
                "consume", self.name,
                f"{tp} offsets {batch[0].offset}..{batch[-1].offset} from broker {broker} "
                f"(epoch {batch[-1].leader_epoch})",
                partition=str(tp), first=batch[0].offset, last=batch[-1].offset, broker=broker,
            )

    def _resume(self) -> None:
        """After a restart, once the new process knows where it resumes a partition (its committed
        offset, or none), publish it, before anything is fetched from there."""
        for tp in sorted(self._resuming):
            committed = self.machine.committed.get(tp)
            if committed is None and self.machine.state_of(tp) == FetchState.INITIALIZING:
                continue  # still asking the coordinator
            self._resuming.discard(tp)
            if committed is None:
                self.ctx.events.publish(ConsumerResumed(self.name, tp, 0, None))
            else:
                key = (tp, committed.offset, epoch_or_sentinel(committed.leader_epoch))
                self.ctx.events.publish(ConsumerResumed(self.name, tp, committed.offset, self._commit_steps.get(key)))

    def _report(self) -> None:
        """Hand the truncations and resets the state machine recorded as events and on the timeline."""
        for event in self.machine.truncations[self._truncations_seen:]:
            self.ctx.events.publish(TruncationReported(self.name, event))
            where = ("unknown" if event.divergent_offset is None
                     else f"{event.divergent_offset} (epoch {event.divergent_epoch})")
            self.ctx.events.record(
                "truncation", self.name,
                f"{event.partition}: log truncated below position {event.position.offset}, divergent offset {where}, "
                f"{event.resolution}",
                partition=str(event.partition), position=event.position.offset,
                divergent_offset=event.divergent_offset, divergent_epoch=event.divergent_epoch,
                resolution=event.resolution,
            )
        self._truncations_seen = len(self.machine.truncations)
        for reset in self.machine.resets[self._resets_seen:]:
            self.ctx.events.publish(ResetReported(self.name, reset))
            self.ctx.events.record(
                "reset", self.name,
                f"{reset.partition}: position reset ({reset.policy}, {reset.reason}) "
                f"from {reset.from_offset} to {reset.to_offset}",
                partition=str(reset.partition), reason=reset.reason, from_offset=reset.from_offset,
                to_offset=reset.to_offset,
            )
        self._resets_seen = len(self.machine.resets)
