"""A consumer application: `epochguard.consumer` state machines (positions, validation, resets) driven
over the network; every delivered record and every reported truncation goes to the checker."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from epochguard.sim.client import Client

if TYPE_CHECKING:
    from epochguard.sim.cluster import Cluster


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


class Consumer(Client):
    def __init__(self, name: str, cluster: Cluster) -> None:
        super().__init__(name, cluster)
        self.consumed: list[ConsumedRecord] = []
