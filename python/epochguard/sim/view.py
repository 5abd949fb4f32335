"""What the cluster shows to the faults it applies and to the invariant checker it runs.

Two narrow, read-mostly views of `epochguard.sim.cluster.Cluster` (which satisfies both structurally),
so that neither `faults` nor `invariants` imports the cluster that imports them: a fault acts through
the cluster's fault hooks (crash, restart, the network, the controller), the checker reads logs,
leaders and the timeline. Like Jepsen's nemesis and checker, neither owns a protocol rule.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from epochguard.sim.broker import Broker
    from epochguard.sim.clock import VirtualClock
    from epochguard.sim.consumer import Consumer
    from epochguard.sim.controller import Controller
    from epochguard.sim.network import Actor, Network
    from epochguard.sim.producer import Producer
    from epochguard.sim.storage import SimLog
    from epochguard.sim.timeline import Timeline
    from epochguard.types import TopicPartition

__all__ = ["ClusterView", "FaultTarget"]


class FaultTarget(Protocol):
    """What a `Fault` may act on: brokers (crash, restart, their metadata lag), the simulated clients
    (restart a consumer; take the producers out of the stepped actors and back), the network links and
    the controller, at the virtual clock's time."""

    @property
    def clock(self) -> VirtualClock: ...
    @property
    def network(self) -> Network: ...
    @property
    def controller(self) -> Controller: ...
    @property
    def broker_ids(self) -> tuple[int, ...]: ...
    @property
    def consumers(self) -> Sequence[Consumer]: ...
    @property
    def producers(self) -> Sequence[Producer]: ...
    @property
    def clients(self) -> list[Actor]: ...

    def broker(self, broker_id: int) -> Broker: ...
    def crash(self, broker_id: int) -> None: ...
    def restart(self, broker_id: int) -> None: ...


class ClusterView(Protocol):
    """What the invariant checker reads: the brokers' logs and leader epochs, the controller's state and
    unclean elections, the acting leaders, the simulated consumers and the timeline it reports into."""

    @property
    def timeline(self) -> Timeline: ...
    @property
    def controller(self) -> Controller: ...
    @property
    def brokers(self) -> Mapping[int, Broker]: ...
    @property
    def topic_partitions(self) -> tuple[TopicPartition, ...]: ...
    @property
    def consumers(self) -> Sequence[Consumer]: ...

    def broker(self, broker_id: int) -> Broker: ...
    def log(self, broker_id: int, tp: TopicPartition) -> SimLog: ...
    def acting_leader(self, tp: TopicPartition) -> int | None: ...
