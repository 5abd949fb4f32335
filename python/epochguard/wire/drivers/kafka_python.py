"""Driver for kafka-python (pure Python): `KafkaConsumer.assign` + `KafkaProducer`, acks=all.

kafka-python reports resets and truncation through its `kafka` loggers and raises what it cannot handle
from `poll()`; both go into the delivery log. `ConsumerRecord.leader_epoch` gives each record's epoch.
"""

from __future__ import annotations

import sys
import time
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

CLIENT = "kafka-python"


def main(argv: Sequence[str] | None = None) -> int:
    import kafka
    from kafka import KafkaConsumer, KafkaProducer

    config = parse_args(CLIENT, argv)
    log = DeliveryLog(config.log)
    stop = Stop(config.max_seconds, log)
    LogForwarder(log).install("kafka")
    options = typed(config.consumer_options)  # both clients' (api_version); `producer.` ones the producer's
    if "api_version" in options:  # "2.6" -> (2, 6): skips the ApiVersions probe
        options["api_version"] = tuple(int(x) for x in str(options["api_version"]).split("."))
    consumer = KafkaConsumer(
        **options,
        bootstrap_servers=config.bootstrap.split(","),
        client_id=config.client_id,
        group_id=config.group,
        enable_auto_commit=False,
        auto_offset_reset=config.reset,
    )
    shared = {k: v for k, v in options.items() if k not in ("client_rack", "isolation_level")}  # consumer's alone
    producer = KafkaProducer(**shared, **typed(config.producer_options), bootstrap_servers=config.bootstrap.split(","),
                             client_id=config.client_id, acks="all")
    log.write("start", client=CLIENT, software="kafka-python", version=kafka.__version__,
              client_id=config.client_id, reset=config.reset)

    def on_sent(value: bytes) -> Any:
        return lambda md: log.produced(md.topic, md.partition, md.offset, value)

    def on_failed(topic: str, value: bytes) -> Any:
        return lambda exc: log.produced(topic, None, None, value, error=repr(exc))

    member = Membership(config, log)
    _attach(consumer, config, stop, log)
    schedule = ProduceSchedule(config)
    while not stop:
        try:
            batches: dict[Any, Any] = member.poll(lambda: consumer.poll(timeout_ms=20),
                                                  lambda: (consumer.commit(), consumer.close()), {})
        except Exception as exc:  # what kafka-python raises to the application: the verdict's evidence
            log.surfaced(f"{type(exc).__name__}: {exc}", source="poll", kind=_exception_kind(exc))
            batches = {}
        for records in batches.values():
            for r in records:
                log.consumed(r.topic, r.partition, r.offset, r.leader_epoch, r.value)
                member.consumed()
        seq = schedule.due()
        if seq is not None:
            value = payload(config.client_id, seq)
            try:
                future = producer.send(config.produce_topic, value)
                future.add_callback(on_sent(value)).add_errback(on_failed(config.produce_topic, value))
            except Exception as exc:
                log.produced(config.produce_topic, None, None, value, error=repr(exc))
    producer.flush(timeout=5)
    producer.close(timeout=5)
    member.close(consumer.close)
    log.close()
    return 0


def _attach(consumer: Any, config: DriverConfig, stop: Stop, log: DeliveryLog) -> None:
    """Subscribe as a member of `--group`, or assign every partition from the beginning."""
    from kafka import TopicPartition

    if config.group:
        consumer.subscribe([config.consume_topic])
        return
    partitions: set[int] | None = None
    while not partitions and not stop:
        try:
            partitions = consumer.partitions_for_topic(config.consume_topic)
        except Exception as exc:  # a broker down at start-up: ask again
            log.surfaced(f"metadata: {exc!r}", source="consumer", kind="error")
            time.sleep(0.1)
    tps = [TopicPartition(config.consume_topic, p) for p in sorted(partitions or ())]
    consumer.assign(tps)
    consumer.seek_to_beginning(*tps)


def _exception_kind(exc: Exception) -> str:
    name = type(exc).__name__
    if "Truncation" in name:
        return "truncation"
    if "OutOfRange" in name:
        return "reset"
    return "error"


if __name__ == "__main__":
    sys.exit(main())
