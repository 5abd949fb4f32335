"""Driver for aiokafka (asyncio): `AIOKafkaConsumer.assign` + `AIOKafkaProducer`, acks=all.

aiokafka's records carry no leader epoch, so `consumed` entries log none; resets and errors come from
its `aiokafka` loggers and from exceptions raised by `getmany()`.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Sequence
from typing import Any

from epochguard.wire.drivers.delivery_log import (
    DeliveryLog,
    DriverConfig,
    LogForwarder,
    Membership,
    ProduceSchedule,
    Stop,
    parse_args,
    payload,
    typed,
)

CLIENT = "aiokafka"


async def _run(config: DriverConfig, log: DeliveryLog, stop: Stop) -> None:
    import aiokafka
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    consumer = AIOKafkaConsumer(
        **typed(config.consumer_options),
        bootstrap_servers=config.bootstrap,
        client_id=config.client_id,
        group_id=config.group,
        enable_auto_commit=False,
        auto_offset_reset=config.reset,
    )
    producer = AIOKafkaProducer(**typed(config.producer_options), bootstrap_servers=config.bootstrap,
                                client_id=config.client_id, acks="all")
    await consumer.start()
    await producer.start()
    log.write("start", client=CLIENT, software="aiokafka", version=aiokafka.__version__,
              client_id=config.client_id, reset=config.reset)
    pending: set[asyncio.Task[None]] = set()

    async def send(value: bytes) -> None:
        try:
            md = await producer.send_and_wait(config.produce_topic, value)
        except Exception as exc:
            log.produced(config.produce_topic, None, None, value, error=repr(exc))
        else:
            log.produced(md.topic, md.partition, md.offset, value)

    member = Membership(config, log)
    await _attach(consumer, producer, config, stop, log)
    schedule = ProduceSchedule(config)
    while not stop:
        try:
            batches: dict[Any, Any] = await member.apoll(lambda: consumer.getmany(timeout_ms=20),
                                                         lambda: _leave(consumer), {})
        except Exception as exc:
            kind = "reset" if "OutOfRange" in type(exc).__name__ else "error"
            log.surfaced(f"{type(exc).__name__}: {exc}", source="getmany", kind=kind)
            batches = {}
        for records in batches.values():
            for r in records:
                log.consumed(r.topic, r.partition, r.offset, None, r.value)
                member.consumed()
        seq = schedule.due()
        if seq is not None:
            task = asyncio.ensure_future(send(payload(config.client_id, seq)))
            pending.add(task)
            task.add_done_callback(pending.discard)
    if pending:
        await asyncio.wait(pending, timeout=5)
    await producer.stop()
    if not member.left:
        await consumer.stop()


async def _attach(consumer: Any, producer: Any, config: DriverConfig, stop: Stop, log: DeliveryLog) -> None:
    """Subscribe as a member of `--group`, or assign every partition from the beginning."""
    from aiokafka import TopicPartition

    if config.group:
        consumer.subscribe([config.consume_topic])
        return
    partitions: set[int] = set()
    while not partitions and not stop:  # the producer's partitions_for waits for the topic's metadata
        try:
            partitions = await producer.partitions_for(config.consume_topic)
        except Exception as exc:
            log.surfaced(f"metadata: {exc!r}", source="producer", kind="error")
    tps = [TopicPartition(config.consume_topic, p) for p in sorted(partitions)]
    consumer.assign(tps)
    await consumer.seek_to_beginning(*tps)


async def _leave(consumer: Any) -> None:
    await consumer.commit()
    await consumer.stop()


def main(argv: Sequence[str] | None = None) -> int:
    config = parse_args(CLIENT, argv)
    log = DeliveryLog(config.log)
    stop = Stop(config.max_seconds, log)
    LogForwarder(log).install("aiokafka")
    asyncio.run(_run(config, log, stop))
    log.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
