"""Driver for the Go clients: franz-go (implements KIP-320), IBM/sarama and segmentio/kafka-go (controls).

`--client franz-go|sarama|kafka-go` picks the client of one Go program, tools/drivers/go (a module with
go.mod and go.sum committed), built once by `toolchain`; each consumes every partition of the topic
from the beginning without a group and produces acks=all records. Its events and the client's log
lines are relayed into the delivery log (`external`); why each client detects a divergence or not is
in the comment heading its source file (franz.go, sarama.go, kafkago.go).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from epochguard.wire.drivers import toolchain
from epochguard.wire.drivers.delivery_log import parse_args
from epochguard.wire.drivers.external import driver_argv, relay

GO_CLIENTS = ("franz-go", "sarama", "kafka-go")


def main(argv: Sequence[str] | None = None) -> int:
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--client", choices=GO_CLIENTS, required=True)
    ns, rest = pre.parse_known_args(sys.argv[1:] if argv is None else argv)
    config = parse_args(ns.client, rest)
    return relay(ns.client, config, toolchain.go_command("--client", ns.client, *driver_argv(config)),
                 prepare=lambda: toolchain.prepare("go"))


if __name__ == "__main__":
    sys.exit(main())
