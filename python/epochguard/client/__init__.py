"""The client side (Kafka's `clients` module).

What a user imports, as kafka-python spells it (`from kafka import KafkaConsumer, TopicPartition`)::

    from epochguard.client import KafkaConsumer, AsyncConsumer, KafkaProducer, AsyncProducer
    from epochguard.client import TopicPartition, OffsetAndMetadata, ConsumerRecord, RecordMetadata

Inside, two layers. Sans-IO: the consumer (`consumer.Consumer`, after `KafkaConsumer` and its
internals), the client's metadata cache (`metadata.ClientMetadata`, after
`org.apache.kafka.clients.Metadata`), group membership (`coordinator`, `assignors`) and the producer
(`producer`); the simulator and `epochguard serve` drive them too. On real sockets: `network`
(`NetworkClient`), `kafka_consumer` (`KafkaConsumer` / `AsyncConsumer`) and `kafka_producer`
(`KafkaProducer` / `AsyncProducer`), which drive the sans-IO layer.

The four network classes are resolved on first use (PEP 562 `__getattr__`), so importing the sans-IO
part (`import epochguard`, `epochguard.client.consumer`) never loads asyncio or the network layer.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from epochguard.types import ConsumerRecord, OffsetAndMetadata, TopicPartition

if TYPE_CHECKING:
    from epochguard.client.kafka_consumer import AsyncConsumer, KafkaConsumer
    from epochguard.client.kafka_producer import AsyncProducer, KafkaProducer
    from epochguard.client.producer import RecordMetadata

# name -> the module that defines it, imported when the name is first asked for.
_LAZY = {
    "KafkaConsumer": "epochguard.client.kafka_consumer",
    "AsyncConsumer": "epochguard.client.kafka_consumer",
    "KafkaProducer": "epochguard.client.kafka_producer",
    "AsyncProducer": "epochguard.client.kafka_producer",
    "RecordMetadata": "epochguard.client.producer",
}

__all__ = ["AsyncConsumer", "AsyncProducer", "ConsumerRecord", "KafkaConsumer", "KafkaProducer",
           "OffsetAndMetadata", "RecordMetadata", "TopicPartition"]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # once: later lookups do not come here
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
