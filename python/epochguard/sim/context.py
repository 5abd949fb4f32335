"""What a simulated actor (broker, producer, consumer, monitor) may use: the clock, the network, the
configuration and an event sink. Not the cluster: an actor cannot reach into another actor's state;
what others need to know, it publishes."""

from __future__ import annotations

from dataclasses import dataclass

from epochguard.sim.clock import VirtualClock
from epochguard.sim.config import ClusterConfig
from epochguard.sim.events import EventSink
from epochguard.sim.network import Network
from epochguard.types import EpochProtocol, TopicPartition

__all__ = ["ActorContext"]


@dataclass(frozen=True, slots=True)
class ActorContext:
    clock: VirtualClock
    network: Network
    config: ClusterConfig
    protocol: EpochProtocol
    events: EventSink
    broker_ids: tuple[int, ...]
    topic_partitions: tuple[TopicPartition, ...]

    @property
    def now_ms(self) -> int:
        return self.clock.now_ms
