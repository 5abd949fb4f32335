"""The streaming matrix's steps on a real Apache Kafka cluster (tests/real_kafka's `KafkaCluster`).

The same face as `guard_cluster.GuardCluster` (`produce`, `isolate_leader`, `unclean_election`, `truth`,
`close`), so `stream_matrix.run_cell` runs a cell on either. One topic per cell, one partition on brokers
[1, 2] (broker 3 holds no replica), min.insync.replicas=1; the steps are the differential script 2's
(tests/real_kafka/test_differential.py), through its `KafkaBackend`:

- `isolate_leader`: follower 2 stops (a controlled shutdown: ISR [1] at once); leader 1 takes the
  records alone, acks=all answering when its high watermark covers them (consumers are served them).
- `unclean_election`: leader 1 stops (the partition has no leader), 2 starts and is elected by
  ElectLeaders UNCLEAN with only the first records. The query runs through that leaderless window
  (a broker's stop and another's start: seconds to tens of seconds), as it would on a real cluster.
- `truth`: the new leader's partition dir once its checkpointed high watermark is its log end.
- `hold_fetches` / `release_fetches` (with a `tests/real_kafka/wire_proxy.KafkaWireProxy` in front of the
  brokers, whose `bootstrap` the query then uses): the query's Fetches at or past an offset wait at the
  proxy, unsent, while the test elects and refills, as serve's `GuardCluster.hold_fetches` holds them.
- `close`: the stopped brokers start again (the old leader truncates and rejoins), so the shared cluster
  is whole for the next test.
"""

from __future__ import annotations

import time
from typing import Any

from epochguard._core import encode_batch
from epochguard.kafka import KafkaCluster
from epochguard.storage.log import PartitionLog
from epochguard.storage.logdir import read_offset_checkpoint
from epochguard.types import TopicPartition
from tests.real_kafka.wire_proxy import KafkaWireProxy


class KafkaGuardCluster:
    def __init__(self, cluster: KafkaCluster, topic: str, proxy: KafkaWireProxy | None = None) -> None:
        from tests.real_kafka.differential import KafkaBackend

        self.kafka = cluster
        self.proxy = proxy
        self.topic = topic
        self.tp = TopicPartition(topic, 0)
        self.backend = KafkaBackend(cluster, topic, [1, 2])
        # every replica's own metadata, not only the admin's broker: a broker restarted by the previous
        # cell answered the first produce UNKNOWN_TOPIC_OR_PARTITION (seen once)
        self.backend.wait(lambda s: s.leader == 1 and s.isr == (1, 2), "leader 1, ISR [1, 2]")
        self.bootstrap = proxy.bootstrap if proxy is not None else cluster.bootstrap
        self.leader = 1
        self.stopped: set[int] = set()
        self.sent = 0

    def produce(self, n: int, acks: Any = "all", partition: int = 0, tag: str = "") -> None:
        """`n` records in one batch to the current leader, each value unique in the topic."""
        assert partition == 0
        ts = int(time.time() * 1000)
        values = []
        for _ in range(n):
            self.sent += 1
            values.append(f"{tag}{self.sent:06d}".encode())
        batch = encode_batch([(v, v, [], ts) for v in values], base_timestamp=ts)
        code, _ = self.backend.produce(self.leader, batch, acks=-1 if acks == "all" else int(acks))
        assert code == 0, f"produce to broker {self.leader}: error {code}"

    def isolate_leader(self, tp: TopicPartition, n: int) -> int:
        assert tp == self.tp and self.leader == 1
        self.backend.stop(2)
        self.stopped.add(2)
        self.backend.wait(lambda s: s.leader == 1 and s.isr == (1,), "ISR [1]")
        self.produce(n)
        return 1

    def unclean_election(self, tp: TopicPartition, old_leader: int) -> int:
        assert tp == self.tp and old_leader == 1
        self.backend.stop(1)
        self.stopped.add(1)
        self.backend.wait(lambda s: s.leader == -1, "no leader")
        self.backend.start(2)
        self.stopped.discard(2)
        self.backend.elect_unclean()
        state = self.backend.wait(lambda s: s.leader == 2, "leader 2 (unclean)")
        self.leader = 2
        return int(state.leader_epoch)

    def truth(self, tp: TopicPartition) -> dict[int, tuple[int, bytes | None]]:
        """offset -> (leader epoch, value) of the leader's log below its high watermark (its files)."""
        assert tp == self.tp
        root = self.kafka.data_dir(self.leader)

        def read() -> tuple[int, PartitionLog]:
            hw = read_offset_checkpoint(root / "replication-offset-checkpoint").get(self.tp, 0)
            return hw, PartitionLog.open(root / f"{self.topic}-0", write_through=False)

        def settled() -> bool:
            hw, log = read()
            return hw == log.log_end_offset

        self.backend.settle(settled, f"leader {self.leader}'s high watermark checkpointed at its log end")
        hw, log = read()
        return {r.offset: (b.partition_leader_epoch, r.value) for b in log.batches() for r in b.records()
                if r.offset < hw}

    def high_watermark(self, tp: TopicPartition) -> int:
        return max(self.truth(tp), default=-1) + 1

    def hold_fetches(self, from_offset: int) -> None:
        if self.proxy is None:
            raise RuntimeError("holding a Fetch needs the wire proxy in front of the brokers (KafkaWireProxy)")
        self.proxy.hold_fetches(from_offset)

    @property
    def held_at(self) -> list[int]:
        return self.proxy.held_at if self.proxy is not None else []

    def release_fetches(self) -> None:
        if self.proxy is not None:
            self.proxy.release_fetches()

    def close(self) -> None:
        try:
            self.release_fetches()
            for b in sorted(self.stopped):
                self.backend.start(b)
            self.stopped.clear()
        finally:
            self.backend.close()
