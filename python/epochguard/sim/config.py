"""The simulated cluster's configuration (broker, client, storage and network settings)."""

from __future__ import annotations

from dataclasses import dataclass

from epochguard.types import ResetPolicy, TopicPartition

__all__ = ["ClusterConfig"]


@dataclass(frozen=True, slots=True)
class ClusterConfig:
    brokers: int = 3
    topic: str = "events"
    partitions: int = 1
    replication_factor: int = 3
    min_insync_replicas: int = 2
    unclean_leader_election: bool = False
    tick_ms: int = 10
    # broker
    replica_lag_time_max_ms: int = 100
    session_timeout_ms: int = 60
    heartbeat_interval_ms: int = 20
    hw_checkpoint_interval_ms: int = 50
    fetch_backoff_ms: int = 20
    # KIP-392: broker b's broker.rack is racks[b - 1] (none past the end), and the leaders name a preferred
    # read replica to consumers with Kafka's RackAwareReplicaSelector when `rack_aware_selector` is on
    racks: tuple[str, ...] = ()
    rack_aware_selector: bool = False
    # clients
    producers: tuple[int, ...] = (-1,)  # one producer per entry: its acks
    transactional_producers: int = 0  # the first N producers write transactions (their acks must be -1)
    abort_every: int = 3  # a transactional producer aborts every abort_every-th transaction
    producer_batch_size: int = 2
    producer_interval_ms: int = 20
    consumers: int = 1
    read_committed_consumers: int = 0  # the first N consumers use isolation.level=read_committed
    auto_offset_reset: ResetPolicy = "earliest"
    commit_interval_ms: int = 100
    monitor: bool = True
    request_timeout_ms: int = 100
    retry_backoff_ms: int = 20
    metadata_backoff_ms: int = 20
    metadata_max_age_ms: int = 100
    # storage: None = in memory; else every broker's log dir lives under data_dir/broker-<id>/
    data_dir: str | None = None
    # network
    base_delay_ms: int = 2
    jitter_ms: int = 3

    def rack(self, broker_id: int) -> str | None:
        return self.racks[broker_id - 1] if 0 < broker_id <= len(self.racks) else None

    def assignment(self) -> dict[TopicPartition, tuple[int, ...]]:
        """Partition p's replicas start at broker (p mod brokers) + 1, like Kafka's round robin."""
        ids = list(range(1, self.brokers + 1))
        return {
            TopicPartition(self.topic, p): tuple(ids[(p + i) % len(ids)] for i in range(self.replication_factor))
            for p in range(self.partitions)
        }
