"""A lag monitor: asks each partition's leader for its latest offset (ListOffsets) again and again,
as `kafka-consumer-groups` or `Consumer.endOffsets()` would; the answers feed `list-offsets-monotonic`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from epochguard.errors import Errors
from epochguard.protocol.messages import (
    ListOffsetsPartition,
    ListOffsetsRequest,
    ListOffsetsResponse,
)
from epochguard.sim.client import Client
from epochguard.sim.events import ListOffsetsAnswered
from epochguard.types import LATEST_TIMESTAMP, NO_EPOCH, TopicPartition

if TYPE_CHECKING:
    from epochguard.sim.context import ActorContext


class OffsetMonitor(Client):
    def __init__(self, name: str, ctx: ActorContext, *, interval_ms: int = 10) -> None:
        super().__init__(name, ctx)
        self.interval_ms = interval_ms
        self._next: dict[TopicPartition, int] = {}
        self.latest: dict[TopicPartition, int] = {}

    def work(self) -> None:
        now = self.now_ms
        for tp in self.ctx.topic_partitions:
            if self.in_flight("list_offsets", tp) or now < self._next.get(tp, 0):
                continue
            leader = self.metadata.current_leader(tp)
            if leader.leader is None:
                self.metadata.request_update()
                continue
            # ListOffsets v4+ carries the client's current leader epoch (fencing); offsets-only clients don't.
            epoch = leader.epoch if self.ctx.protocol == "kip-320" and leader.epoch is not None else NO_EPOCH
            request = ListOffsetsRequest((ListOffsetsPartition(tp.topic, tp.partition, LATEST_TIMESTAMP, epoch),))
            self.send(leader.leader, request, "list_offsets", tp)
            self._next[tp] = now + self.interval_ms

    def on_response(self, kind: str, context: Any, response: ListOffsetsResponse, broker: int) -> None:
        tp: TopicPartition = context
        for answer in response.partitions:
            if answer.tp != tp:
                continue
            if answer.error_code == Errors.NONE and answer.offset >= 0:
                if self.latest.get(tp) != answer.offset:
                    self.latest[tp] = answer.offset
                self.ctx.events.publish(ListOffsetsAnswered(self.name, tp, answer.offset, answer.leader_epoch))
            elif answer.error_code != Errors.OFFSET_NOT_AVAILABLE:  # a lagging new leader: just ask again
                self.metadata.request_update()
