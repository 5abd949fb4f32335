"""Driver for Apache Kafka's Java client (kafka-clients, the reference implementation of KIP-320).

`--variant classic|consumer` sets `group.protocol`, which alone picks the consumer implementation
(`ConsumerDelegateCreator`: ClassicKafkaConsumer or AsyncKafkaConsumer, with or without a group): the
clients `java-classic` and `java-consumer`. Both consume with assign() and no group, so neither needs
the broker's group APIs (KIP-848's ConsumerGroupHeartbeat included). The program is
tools/drivers/java/Driver.java run on the jars of tools/drivers/java/pom.xml (`toolchain`); its events
and log lines are relayed into the delivery log (`external`).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from epochguard.wire.drivers import toolchain
from epochguard.wire.drivers.delivery_log import parse_args
from epochguard.wire.drivers.external import driver_argv, relay

VARIANTS = ("classic", "consumer")


def main(argv: Sequence[str] | None = None) -> int:
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--variant", choices=VARIANTS, default="classic", help="group.protocol")
    ns, rest = pre.parse_known_args(sys.argv[1:] if argv is None else argv)
    client = f"java-{ns.variant}"
    config = parse_args(client, rest)
    config.options.setdefault("group.protocol", ns.variant)
    return relay(client, config, toolchain.java_command(*driver_argv(config)),
                 prepare=lambda: toolchain.prepare("java"))


if __name__ == "__main__":
    sys.exit(main())
