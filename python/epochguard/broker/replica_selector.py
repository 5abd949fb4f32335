"""Which replica a consumer should read from (KIP-392, fetch from follower), sans-IO.

Mirrors Kafka's `org.apache.kafka.common.replica` (`ReplicaView`, `ReplicaSelector`,
`RackAwareReplicaSelector`): the leader builds a view of each replica a consumer may read from
(`ReplicaManager.find_preferred_read_replica`, Kafka's `ReplicaManager.findPreferredReadReplica`) and the
selector picks one; the leader names it in its Fetch answer (`preferred_read_replica`) unless it picked
itself. Kafka has no selector unless `replica.selector.class` is set; `RackAwareReplicaSelector` is the one
it ships.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Protocol

__all__ = ["ReplicaView", "ReplicaSelector", "RackAwareReplicaSelector", "most_caught_up"]


@dataclass(frozen=True, slots=True)
class ReplicaView:
    """One replica as the leader sees it (`ReplicaView.DefaultReplicaView`). `known` is False for a
    replica without an endpoint in the metadata (Kafka's `Node.noNode()`: fenced or unknown), which is
    never named; `rack` is its broker's `broker.rack` (None: not set)."""

    broker_id: int
    log_end_offset: int
    time_since_last_caught_up_ms: int
    rack: str | None = None
    known: bool = True


def most_caught_up(view: ReplicaView) -> tuple[int, int, int]:
    """`ReplicaView.comparator()` as a sort key: the highest log end offset, then the shortest time since it
    was last caught up, then the highest broker id."""
    return (view.log_end_offset, -view.time_since_last_caught_up_ms, view.broker_id)


class ReplicaSelector(Protocol):
    def select(self, rack_id: str, replicas: Collection[ReplicaView], leader: ReplicaView) -> ReplicaView | None:
        """The replica a consumer in `rack_id` ("" = none given) should read from; `replicas` includes the
        leader. None: no preference (the leader)."""
        ...


class RackAwareReplicaSelector:
    """Kafka's `RackAwareReplicaSelector`: the leader if the client gave no rack, if no replica is in its
    rack, or if the leader is; else the most caught-up replica in the client's rack."""

    def select(self, rack_id: str, replicas: Collection[ReplicaView], leader: ReplicaView) -> ReplicaView | None:
        if not rack_id:
            return leader
        same_rack = [r for r in replicas if r.known and r.rack == rack_id]
        if not same_rack or leader in same_rack:
            return leader
        return max(same_rack, key=most_caught_up)
