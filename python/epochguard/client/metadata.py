"""The client's metadata cache, which accepts or rejects each partition's metadata by leader epoch (KIP-232).

Mirrors Kafka's `org.apache.kafka.clients.Metadata` (`updateLatestMetadata`, `updateLastSeenEpochIfNewer`,
`partitionMetadataIfCurrent`, `currentLeader`, `updatePartitionLeadership`) and `MetadataCache`.
Sans-IO: the owner sends `build_request()` when `should_update(now_ms)` and feeds the answer to `update()`.
Under `protocol="pre-kip-320"` there is no epoch check: every response is accepted as is.

`any_node` picks where a request for any broker goes (Metadata, FindCoordinator, InitProducerId): the
driver's `least_loaded` chooser (the network's `leastLoadedNode`, which knows connections and back-offs),
or without one a rotation through the candidates, so a node that does not answer is not asked forever.
When every broker the metadata names is unavailable, it asks the bootstrap addresses again (KIP-899's
`metadata.recovery.strategy=rebootstrap`, Kafka 4.0's default): a KRaft broker's Metadata answer names only
the brokers alive then, so a client that last heard from the one broker still up when the others had
stopped would otherwise ask only it, forever, after it stopped too and the others came back.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from epochguard.errors import Errors
from epochguard.protocol.messages import (
    MetadataRequest,
    MetadataResponse,
    MetadataResponseBroker,
    MetadataResponsePartition,
)
from epochguard.types import EpochProtocol, LeaderAndEpoch, TopicPartition

__all__ = ["PartitionMetadata", "MetadataUpdate", "ClientMetadata", "NodeChooser"]

# candidates -> the node to send to, or None when none may be tried now
NodeChooser = Callable[[Sequence[int]], "int | None"]

_EPOCH_TRUSTED_FROM_VERSION = 9


@dataclass(frozen=True, slots=True)
class PartitionMetadata:
    """One partition as the cache holds it (`MetadataResponse.PartitionMetadata`)."""

    tp: TopicPartition
    leader_id: int | None
    leader_epoch: int | None
    replica_ids: tuple[int, ...] = ()
    isr: tuple[int, ...] = ()
    offline_replicas: tuple[int, ...] = ()
    error: Errors = Errors.NONE

    def without_leader_epoch(self) -> PartitionMetadata:
        return PartitionMetadata(
            self.tp, self.leader_id, None, self.replica_ids, self.isr, self.offline_replicas, self.error
        )


@dataclass(frozen=True, slots=True)
class MetadataUpdate:
    """What one `update()` did, per partition: accepted, or rejected as stale (the old entry kept)."""

    accepted: tuple[TopicPartition, ...] = ()
    rejected: tuple[TopicPartition, ...] = ()
    removed: tuple[TopicPartition, ...] = ()


class ClientMetadata:
    """A client's view of leaders and epochs (see module docstring)."""

    def __init__(
        self,
        *,
        protocol: EpochProtocol = "kip-320",
        topics: Iterable[str] | None = None,
        refresh_backoff_ms: int = 100,
        metadata_max_age_ms: int = 300_000,
        least_loaded: NodeChooser | None = None,
    ) -> None:
        self.protocol: EpochProtocol = protocol
        self.least_loaded = least_loaded
        self._rotation = 0
        self.topics: set[str] | None = set(topics) if topics is not None else None
        self.refresh_backoff_ms = refresh_backoff_ms
        self.metadata_max_age_ms = metadata_max_age_ms
        self._partitions: dict[TopicPartition, PartitionMetadata] = {}
        self._counts: dict[str, int] = {}  # topic -> partitions cached; the set changes only in update()
        self._last_seen_epochs: dict[TopicPartition, int] = {}
        self._topic_ids: dict[str, str] = {}
        self._brokers: dict[int, MetadataResponseBroker] = {}
        self._need_update = True
        self._last_refresh_ms = 0  # read only once an update() has set it (until then an update is requested)
        self._last_attempt_ms: int | None = None
        self.updates = 0  # accepted responses, for observers

    def any_node(self, bootstrap: Iterable[int]) -> int | None:
        """Where a request any broker can answer goes: a known broker (the bootstrap nodes until metadata
        names them), chosen by `least_loaded`, else the next in rotation; None when none may be tried."""
        candidates = sorted(self._brokers) or list(bootstrap)
        if not candidates:
            return None
        if self.least_loaded is not None:
            node = self.least_loaded(candidates)
            if node is None and self._brokers:  # none of them available: rebootstrap (NetworkClient.maybeUpdate)
                node = self.least_loaded(list(bootstrap))
            return node
        node = candidates[self._rotation % len(candidates)]
        self._rotation += 1
        return node

    # --- refresh scheduling -------------------------------------------------------------------
    def add_topics(self, topics: Iterable[str]) -> None:
        new = set(topics)
        if self.topics is not None and not new <= self.topics:
            self.topics |= new
            self._need_update = True

    def request_update(self) -> None:
        self._need_update = True

    @property
    def update_requested(self) -> bool:
        return self._need_update

    def next_update_ms(self) -> int:
        """When a refresh is due (absolute ms): after backoff when requested, else when the data ages out."""
        if self._last_attempt_ms is None:
            return 0
        backoff_over = self._last_attempt_ms + self.refresh_backoff_ms
        if self._need_update:
            return backoff_over
        return max(backoff_over, self._last_refresh_ms + self.metadata_max_age_ms)

    def time_to_next_update(self, now_ms: int) -> int:
        """Milliseconds until a refresh is due (see `next_update_ms`)."""
        return max(0, self.next_update_ms() - now_ms)

    def should_update(self, now_ms: int) -> bool:
        return self.time_to_next_update(now_ms) == 0

    def build_request(self, now_ms: int) -> MetadataRequest:
        """The request to send now (records the attempt for backoff)."""
        self._last_attempt_ms = now_ms
        return MetadataRequest(topics=None if self.topics is None else tuple(sorted(self.topics)))

    def failed_update(self, now_ms: int) -> None:
        self._last_attempt_ms = now_ms
        self._need_update = True

    # --- updates ------------------------------------------------------------------------------
    def update(self, response: MetadataResponse, now_ms: int) -> MetadataUpdate:
        """Apply a Metadata response partition by partition (SPEC (f)); a rejection asks for another refresh."""
        self._last_attempt_ms = self._last_refresh_ms = now_ms
        self._need_update = False
        self.updates += 1
        if response.brokers:
            self._brokers = {b.node_id: b for b in response.brokers}
        trusted = response.version >= _EPOCH_TRUSTED_FROM_VERSION
        accepted: list[TopicPartition] = []
        rejected: list[TopicPartition] = []
        # A full update (Kafka's `new MetadataSnapshot`): the cache is rebuilt from the response, so the
        # partitions and topic ids of topics absent from it (deleted) or answering an error go away.
        # Last-seen epochs stay: a position may wait on one, and topic re-creation resets it.
        old_partitions, old_topic_ids = self._partitions, self._topic_ids
        self._partitions, self._topic_ids = {}, {}
        self._counts = {}
        for topic in response.topics:
            if topic.topic_id is not None:
                self._topic_ids[topic.name] = topic.topic_id
            if topic.error_code != Errors.NONE:
                if topic.error_code.retriable:
                    self._need_update = True
                continue
            old_topic_id = old_topic_ids.get(topic.name)  # compared only when this answer names an id
            for p in topic.partitions:
                tp = TopicPartition(topic.name, p.partition_index)
                if self._accept(tp, p, trusted, topic.topic_id, old_topic_id):
                    accepted.append(tp)
                else:
                    rejected.append(tp)
                    if tp in old_partitions:
                        self._partitions[tp] = old_partitions[tp]  # stale answer: keep what we had
        removed = sorted(tp for tp in old_partitions if tp not in self._partitions)
        if rejected:
            self._need_update = True  # stale answer: ask again (after backoff)
        return MetadataUpdate(tuple(accepted), tuple(rejected), tuple(removed))

    def _accept(
        self,
        tp: TopicPartition,
        p: MetadataResponsePartition,
        trusted: bool,
        topic_id: str | None,
        old_topic_id: str | None,
    ) -> bool:
        meta = PartitionMetadata(
            tp=tp,
            leader_id=p.leader_id if p.leader_id >= 0 else None,
            leader_epoch=p.leader_epoch if p.leader_epoch >= 0 else None,
            replica_ids=p.replica_nodes,
            isr=p.isr_nodes,
            offline_replicas=p.offline_replicas,
            error=p.error_code,
        )
        if self.protocol == "pre-kip-320":
            self._partitions[tp] = meta
            return True
        if trusted and meta.leader_epoch is not None:
            current = self._last_seen_epochs.get(tp)
            topic_changed = topic_id is not None and topic_id != old_topic_id
            if current is None or topic_changed or meta.leader_epoch >= current:
                self._last_seen_epochs[tp] = meta.leader_epoch
                self._partitions[tp] = meta
                return True
            return False  # stale: the caller keeps what it had (absent stays absent)
        # No usable epoch (old version, or a leaderless partition answering -1): forget the last-seen.
        self._last_seen_epochs.pop(tp, None)
        self._partitions[tp] = meta.without_leader_epoch()
        return True

    def update_last_seen_epoch_if_newer(self, tp: TopicPartition, epoch: int) -> bool:
        """Raise the last-seen epoch (from a committed offset, a seek, a ListOffsets answer). Only
        when one is known and `epoch` is newer; then a full refresh is requested. Under pre-kip-320 no
        last-seen epoch is ever stored, so this never raises one."""
        if epoch < 0:
            raise ValueError(f"invalid leader epoch {epoch} (must be non-negative)")
        current = self._last_seen_epochs.get(tp)
        if current is None or epoch <= current:
            return False
        self._last_seen_epochs[tp] = epoch
        self._need_update = True
        return True

    def update_partition_leadership(self, tp: TopicPartition, leader_id: int, leader_epoch: int) -> bool:
        """KIP-951 leader hint from a Fetch/Produce response: applied only if the leader and epoch are
        present, the epoch is newer than known, the node is known and the partition is cached."""
        cached = self._partitions.get(tp)
        if leader_id < 0 or leader_epoch < 0 or cached is None:
            return False
        known = self.current_leader(tp).epoch  # Kafka compares with currentLeader(), not the last-seen map
        if known is not None and leader_epoch <= known:
            return False
        if self._brokers and leader_id not in self._brokers:
            return False
        # only leader and epoch change: the replica sets and the partition's error stay as cached
        self._partitions[tp] = PartitionMetadata(
            tp, leader_id, leader_epoch, cached.replica_ids, cached.isr, cached.offline_replicas, cached.error
        )
        if self.protocol == "kip-320":
            self._last_seen_epochs[tp] = leader_epoch
        return True

    # --- queries ------------------------------------------------------------------------------
    def partition_metadata(self, tp: TopicPartition) -> PartitionMetadata | None:
        return self._partitions.get(tp)

    def partition_metadata_if_current(self, tp: TopicPartition) -> PartitionMetadata | None:
        """The cached partition, unless a newer epoch has been seen than the one it carries."""
        meta = self._partitions.get(tp)
        epoch = self._last_seen_epochs.get(tp)
        if epoch is None or meta is None:
            return meta
        return meta if meta.leader_epoch == epoch else None

    def current_leader(self, tp: TopicPartition) -> LeaderAndEpoch:
        """(leader, epoch) from current metadata, else (None, last-seen epoch): wait for a refresh."""
        meta = self.partition_metadata_if_current(tp)
        if meta is None:
            return LeaderAndEpoch(None, self._last_seen_epochs.get(tp))
        leader = meta.leader_id
        if leader is not None and self._brokers and leader not in self._brokers:
            leader = None  # the leader's node is not in the response
        return LeaderAndEpoch(leader, meta.leader_epoch)

    def last_seen_leader_epoch(self, tp: TopicPartition) -> int | None:
        return self._last_seen_epochs.get(tp)

    def topic_id(self, topic: str) -> str | None:
        return self._topic_ids.get(topic)

    @property
    def brokers(self) -> dict[int, MetadataResponseBroker]:
        return dict(self._brokers)

    def partitions_for(self, topic: str) -> list[TopicPartition]:
        return sorted(tp for tp in self._partitions if tp.topic == topic)

    def partition_count(self, topic: str) -> int:
        """`len(partitions_for(topic))`, without a scan per call (a producer asks once per record)."""
        count = self._counts.get(topic)
        if count is None:
            count = self._counts[topic] = sum(1 for tp in self._partitions if tp.topic == topic)
        return count


def is_pattern(name: str) -> bool:
    """Whether a `--topic` / `--group` argument is a shell pattern rather than a name."""
    return any(c in name for c in "*?[")


def name_matcher(patterns: Iterable[str] | None) -> Callable[[str], bool]:
    """Names or shell-style patterns (`orders-*`) -> a predicate; None or empty: everything."""
    pats = list(patterns or ())
    if not pats:
        return lambda _name: True
    regex = re.compile("|".join(fnmatch.translate(p) for p in pats))
    return lambda name: regex.match(name) is not None
