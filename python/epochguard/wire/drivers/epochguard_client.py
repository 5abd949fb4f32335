"""Driver for epochguard's own client (`epochguard.client`): `KafkaConsumer.assign`, or with `--asyncio`
`AsyncConsumer`, from the beginning of every partition of the consume topic.

The client reports what the state machine did as data (`truncations`, `resets`) and raises
`LogTruncationError` under `--reset none` (the driver then seeks to the divergent offsets it names, or
to the beginning where the leader could not say); each goes into the delivery log. `ConsumerRecord`
carries the leader epoch. It produces to the produce topic with `KafkaProducer` / `AsyncProducer`,
acks=all, one record per `--produce-interval-ms`.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Sequence
from typing import Any

from epochguard.wire.drivers.delivery_log import (
    DeliveryLog,
    DriverConfig,
    Membership,
    ProduceSchedule,
    Stop,
    parse_args,
    payload,
    typed,
)

CLIENT = "epochguard"
ASYNC_CLIENT = "epochguard-asyncio"


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    use_asyncio = "--asyncio" in args
    if use_asyncio:
        args.remove("--asyncio")
    config = parse_args(ASYNC_CLIENT if use_asyncio else CLIENT, args)
    log = DeliveryLog(config.log)
    stop = Stop(config.max_seconds, log)
    asyncio.run(_run(config, log, stop, use_asyncio))
    log.close()
    return 0


def _settings(config: DriverConfig) -> dict[str, Any]:
    return {**typed(config.consumer_options), "bootstrap_servers": config.bootstrap, "client_id": config.client_id,
            "group_id": config.group, "enable_auto_commit": False, "auto_offset_reset": config.reset}


class _Reporter:
    """Writes the client's truncations and resets (data, not log lines) into the delivery log once each."""

    def __init__(self, log: DeliveryLog) -> None:
        self.log = log
        self.truncations = 0
        self.resets = 0

    def report(self, consumer: Any) -> None:
        for event in consumer.truncations[self.truncations:]:
            self.log.surfaced(f"log truncation detected on {event.partition} below position {event.position.offset}: "
                              f"divergent offset {event.divergent_offset} (epoch {event.divergent_epoch}), "
                              f"{event.resolution}", source="truncations", kind="truncation")
        self.truncations = len(consumer.truncations)
        for reset in consumer.resets[self.resets:]:
            self.log.surfaced(f"offset reset on {reset.partition} ({reset.policy}, {reset.reason}) from "
                              f"{reset.from_offset} to {reset.to_offset}", source="resets", kind="reset")
        self.resets = len(consumer.resets)


def _start_line(log: DeliveryLog, config: DriverConfig, name: str) -> None:
    from epochguard import _core

    log.write("start", client=name, software=name, version=_core.__version__, client_id=config.client_id,
              reset=config.reset)


class _Blocking:
    """The blocking `KafkaConsumer` behind the awaitable calls of the one driver loop (they block the
    driver's own event loop, which has nothing else to do)."""

    def __init__(self, consumer: Any) -> None:
        self.consumer = consumer

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.consumer, name)
        if not callable(attr):
            return attr

        async def call(*args: Any, **kwargs: Any) -> Any:
            return attr(*args, **kwargs)

        return call


async def _run(config: DriverConfig, log: DeliveryLog, stop: Stop, use_asyncio: bool) -> None:
    from epochguard.client import AsyncConsumer, AsyncProducer, KafkaConsumer, KafkaProducer
    from epochguard.errors import EpochGuardError, LogTruncationError

    consumer: Any = AsyncConsumer(**_settings(config)) if use_asyncio else _Blocking(KafkaConsumer(**_settings(config)))
    producer_settings = {"acks": "all", **typed(config.producer_options), "bootstrap_servers": config.bootstrap,
                         "client_id": config.client_id}
    producer: Any = (AsyncProducer(**producer_settings) if use_asyncio
                     else _Blocking(KafkaProducer(**producer_settings)))
    schedule = ProduceSchedule(config)
    _start_line(log, config, ASYNC_CLIENT if use_asyncio else CLIENT)
    reporter = _Reporter(log)
    member = Membership(config, log)
    tps = await _attach(consumer, config, stop, log)
    while not stop:
        try:
            batches: dict[Any, Any] = await member.apoll(lambda: consumer.poll(timeout_ms=100),
                                                         lambda: _leave(consumer), {})
        except LogTruncationError as exc:
            reporter.report(consumer)
            log.surfaced(f"{type(exc).__name__}: {exc}", source="poll", kind="truncation")
            for tp in exc.offset_out_of_range_partitions:
                divergent = exc.divergent_offsets.get(tp)
                if divergent is not None:
                    await consumer.seek(tp, divergent)
                else:
                    await consumer.seek_to_beginning(tp)
            continue
        except EpochGuardError as exc:
            reporter.report(consumer)
            log.surfaced(f"{type(exc).__name__}: {exc}", source="poll", kind="error")
            await consumer.seek_to_beginning(*tps)
            continue
        reporter.report(consumer)
        for records in batches.values():
            for r in records:
                log.consumed(r.topic, r.partition, r.offset, r.leader_epoch, r.value)
                member.consumed()
        await _produce_due(producer, schedule, config, log)
    await producer.flush(5)
    await producer.close()
    if not member.left:
        await consumer.close()


async def _attach(consumer: Any, config: DriverConfig, stop: Stop, log: DeliveryLog) -> list[Any]:
    """Subscribe as a member of `--group`, or assign every partition from the beginning; the partitions
    assigned (none for a member: the group assigns them)."""
    from epochguard.errors import EpochGuardError
    from epochguard.types import TopicPartition

    if config.group:
        await consumer.subscribe([config.consume_topic])
        return []
    partitions: set[int] = set()
    while not partitions and not stop:
        try:
            partitions = await consumer.partitions_for_topic(config.consume_topic)
        except EpochGuardError as exc:
            log.surfaced(f"metadata: {exc!r}", source="consumer", kind="error")
    tps = [TopicPartition(config.consume_topic, p) for p in sorted(partitions)]
    await consumer.assign(tps)
    await consumer.seek_to_beginning(*tps)
    return tps


async def _leave(consumer: Any) -> None:
    await consumer.commit()
    await consumer.close()


async def _produce_due(producer: Any, schedule: ProduceSchedule, config: DriverConfig, log: DeliveryLog) -> None:
    from epochguard.errors import EpochGuardError

    seq = schedule.due()
    if seq is None:
        return
    value = payload(config.client_id, seq)
    topic = config.produce_topic

    def done(d: Any) -> None:
        if d.metadata is not None:
            log.produced(topic, d.metadata.partition, d.metadata.offset, value)
        else:
            log.produced(topic, None, None, value, error=repr(d.error))

    try:
        sent = await producer.send(topic, value)
    except EpochGuardError as exc:
        log.produced(topic, None, None, value, error=repr(exc))
        return
    getattr(sent, "delivery", sent).on_done(done)


if __name__ == "__main__":
    sys.exit(main())
