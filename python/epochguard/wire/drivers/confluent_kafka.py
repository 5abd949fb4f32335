"""Driver for confluent-kafka (librdkafka, bundled in its wheel): `Consumer.assign` + `Producer`, acks=all.

librdkafka surfaces truncation and resets as consumer error events (`_LOG_TRUNCATION`,
`_AUTO_OFFSET_RESET`) and as log lines; both are kept. `Message.leader_epoch()` gives each record's epoch.
"""

from __future__ import annotations

import logging
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
)

CLIENT = "confluent-kafka"


class _LibrdkafkaLog(logging.Handler):
    """librdkafka's log callback (`logger` setting) into the delivery log."""

    def __init__(self, log: DeliveryLog) -> None:
        super().__init__(logging.DEBUG)
        self._log = log

    def emit(self, record: logging.LogRecord) -> None:
        self._log.surfaced(record.getMessage(), source=f"librdkafka:{record.levelname}")


def main(argv: Sequence[str] | None = None) -> int:
    import confluent_kafka as ck

    config = parse_args(CLIENT, argv)
    log = DeliveryLog(config.log)
    stop = Stop(config.max_seconds, log)
    logger = logging.getLogger(f"epochguard.driver.{CLIENT}")
    logger.propagate = False
    logger.setLevel(logging.DEBUG)
    logger.addHandler(_LibrdkafkaLog(log))
    def on_error(err: ck.KafkaError) -> None:  # the rest are in librdkafka's log lines already
        if err.fatal():
            log.surfaced(f"{err.name()} (fatal): {err.str()}", source="client", kind="error")

    common = {"bootstrap.servers": config.bootstrap, "client.id": config.client_id, "logger": logger,
              "error_cb": on_error}
    consumer = ck.Consumer({
        **common,
        "group.id": config.group or config.client_id,  # required by the constructor; assign() never joins it
        "enable.auto.commit": False,
        "auto.offset.reset": "error" if config.reset == "none" else config.reset,
        **config.consumer_options,  # client.rack (follower-fetch-lag)
    })
    producer = ck.Producer({**common, "acks": "all", "linger.ms": 5, **config.producer_options})
    version: object = ck.version()  # a (str, int) pair in most builds, a bare str in some
    binding = version[0] if isinstance(version, tuple) else str(version)
    log.write("start", client=CLIENT, software="confluent-kafka",
              version=f"{binding} (librdkafka {ck.libversion()[0]})", client_id=config.client_id,
              reset=config.reset)

    def delivered(err: ck.KafkaError | None, msg: ck.Message) -> None:
        value = msg.value() or b""
        topic = msg.topic() or config.produce_topic
        if err is not None:
            log.produced(topic, msg.partition(), None, value, error=str(err))
        else:
            log.produced(topic, msg.partition(), msg.offset(), value)

    member = Membership(config, log)
    _attach(consumer, config, stop, log)
    schedule = ProduceSchedule(config)
    fatal = False  # an idempotent producer's fatal error (librdkafka raises it on every produce after)
    while not stop:
        msg = member.poll(lambda: consumer.poll(0.02), lambda: _leave(consumer), None)
        if msg is not None:
            err = msg.error()
            if err is not None:
                kind = {ck.KafkaError._LOG_TRUNCATION: "truncation",  # type: ignore[attr-defined]
                        ck.KafkaError._AUTO_OFFSET_RESET: "reset"}.get(err.code())  # type: ignore[attr-defined]
                if err.code() != ck.KafkaError._PARTITION_EOF:
                    log.surfaced(f"{err.name()}: {err.str()} ({msg.topic()} [{msg.partition()}])",
                                 source="consumer", kind=kind or "error")
            else:
                topic, partition, offset = msg.topic(), msg.partition(), msg.offset()
                assert topic is not None and partition is not None and offset is not None  # a record has them
                log.consumed(topic, partition, offset, msg.leader_epoch(), msg.value())
                member.consumed()
        if not fatal:
            fatal = _produce_due(producer, schedule.due(), config, delivered, log)
    try:
        remaining = producer.flush(5.0)
    except ck.KafkaException as exc:
        remaining = len(producer)
        _fatal(log, "flush", exc)
    if remaining:
        log.surfaced(f"{remaining} records still unacknowledged at exit", source="producer", kind="error")
    member.close(consumer.close)
    log.close()
    return 0


def _attach(consumer: Any, config: DriverConfig, stop: Stop, log: DeliveryLog) -> None:
    """Subscribe as a member of `--group`, or assign every partition from the beginning."""
    import confluent_kafka as ck

    if config.group:
        consumer.subscribe([config.consume_topic], on_assign=lambda _c, ps: log.write(
            "assigned", topic=config.consume_topic, partitions=[p.partition for p in ps]))
        return
    partitions = _wait_for_partitions(consumer, config.consume_topic, stop, log)
    consumer.assign([ck.TopicPartition(config.consume_topic, p, ck.OFFSET_BEGINNING) for p in partitions])


def _leave(consumer: Any) -> None:
    consumer.commit(asynchronous=False)
    consumer.close()


def _produce_due(producer: Any, seq: int | None, config: DriverConfig, delivered: Any, log: DeliveryLog) -> bool:
    """Send record `seq` if one is due and serve delivery callbacks; whether the producer hit a fatal error."""
    import confluent_kafka as ck

    try:
        if seq is not None:
            try:
                producer.produce(config.produce_topic, payload(config.client_id, seq), on_delivery=delivered)
            except BufferError as exc:
                log.surfaced(f"produce: {exc}", source="producer", kind="error")
        producer.poll(0)  # delivery callbacks; raises a fatal error once
    except ck.KafkaException as exc:
        return _fatal(log, "produce", exc)
    return False


def _fatal(log: DeliveryLog, call: str, exc: Exception) -> bool:
    """A KafkaException from the producer into the delivery log; whether it is fatal (librdkafka's
    idempotent producer after a sequence desynchronization: it will produce nothing more)."""
    err = exc.args[0]
    fatal = bool(err.fatal())
    log.surfaced(f"{call}: {err.name()}{' (fatal)' if fatal else ''}: {err.str()}", source="producer", kind="error")
    return fatal


def _wait_for_partitions(consumer: object, topic: str, stop: Stop, log: DeliveryLog) -> list[int]:
    """The topic's partitions from metadata, asking until the topic exists."""
    while not stop:
        try:
            md = consumer.list_topics(topic, timeout=2.0)  # type: ignore[attr-defined]
        except Exception as exc:  # KafkaException: no broker answered yet
            log.surfaced(f"metadata: {exc}", source="consumer", kind="error")
            continue
        meta = md.topics.get(topic)
        if meta is not None and meta.error is None and meta.partitions:
            return sorted(meta.partitions)
    return []


if __name__ == "__main__":
    sys.exit(main())
