"""The group coordinator node: `epochguard.broker.group.coordinator.GroupCoordinator` (committed offsets and their
leader epochs) behind a network address. Kafka keeps it in a replicated internal topic; here it is a
node that never fails, so committed offsets are never the thing being tested."""

from __future__ import annotations

from epochguard.broker.group.coordinator import GroupCoordinator
from epochguard.sim.network import Envelope, Network

COORDINATOR = "coordinator"
COORDINATOR_ID = 1000  # its node id for the consumer state machines (brokers are 1..n)
GROUP_ID = "sim-group"


class CoordinatorNode:
    def __init__(self, network: Network) -> None:
        self.network = network
        self.coordinator = GroupCoordinator()

    def receive(self, env: Envelope) -> None:
        if env.reply_to is None:
            self.network.reply(env, self.coordinator.handle(-1, env.payload, self.network.clock.now_ms))

    def tick(self) -> None:
        """Nothing to do on its own."""
