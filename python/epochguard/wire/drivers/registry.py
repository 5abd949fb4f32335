"""The real clients epochguard drives, how to start each, and what each needs installed."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from epochguard.wire.drivers import toolchain


@dataclass(frozen=True)
class Client:
    name: str  # as in `epochguard-<name>`, the client id the server's verdicts are matched on
    module: str  # python -m <module>
    needs: str  # what to install, named for the skip message
    importable: str | None = None  # a Python package that must import
    executable: str | None = None  # a program that must be on PATH
    toolchain: str | None = None  # a driver built by `toolchain` ("java", "go") before it runs
    args: tuple[str, ...] = ()  # given to the driver module before the common arguments
    # The driver arguments that make its producer idempotent (`()`: it is by default); None: its driver has
    # no idempotent producer, and it sits out the producer scenarios (session.PRODUCER_SCENARIOS).
    idempotent: tuple[str, ...] | None = None
    # The driver option naming the consumer's rack (Java's `client.rack`; KIP-392, follower-fetch-lag), given
    # as `--option KEY=RACK`; None: the client cannot fetch from a follower, and sits out that scenario.
    rack: str | None = None
    # The driver option that makes its consumer read_committed (`isolation.level`, each client's own name
    # for it), given as `--option KEY=read_committed`; None: its consumer cannot, and it sits out the
    # transactional scenarios (session.TXN_SCENARIOS).
    isolation: str | None = None
    # Its driver can run as a member of a group (`--group G`, `--leave-when-idle S`: subscribe, commit, leave),
    # as `handoff-truncation` runs it (session.HANDOFF_SCENARIOS); False: it sits out that scenario.
    group: bool = False
    # Why the client cannot be a group member against `serve` at all (its cell says n/a), where that is so.
    group_na: str | None = None

    def isolation_args(self) -> tuple[str, ...]:
        return () if self.isolation is None else ("--option", f"{self.isolation}=read_committed")

    def rack_args(self, rack: str) -> tuple[str, ...]:
        return () if self.rack is None else ("--option", f"{self.rack}={rack}")

    @property
    def client_id(self) -> str:
        return f"epochguard-{self.name}"

    def missing(self) -> str | None:
        """None when the client can run here, else what is missing."""
        if self.importable and importlib.util.find_spec(self.importable) is None:
            return f"{self.needs} is not installed (pip install '{self.needs}')"
        if self.executable and shutil.which(self.executable) is None:
            return f"{self.executable} is not on PATH (Debian: apt-get install {self.executable})"
        if self.toolchain:
            return toolchain.missing(self.toolchain)
        return None

    def prepare(self) -> None:
        """Build what the driver runs, if it is not cached (Maven jars, javac, go build): minutes on a
        fresh machine, nothing after. Raises `toolchain.ToolchainError` naming what is missing."""
        if self.toolchain:
            toolchain.prepare(self.toolchain)

    def start(self, bootstrap: str, log: Path, *extra: str) -> subprocess.Popen[bytes]:
        """The driver as a child process writing its delivery log to `log`; stop it with SIGTERM."""
        with open(log.with_suffix(".stderr"), "wb") as stderr:  # the child keeps its own descriptor
            return subprocess.Popen(
                [sys.executable, "-m", self.module, *self.args, "--bootstrap", bootstrap, "--log", str(log), *extra],
                stdout=subprocess.DEVNULL,
                stderr=stderr,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )


CLIENTS: tuple[Client, ...] = (
    Client("confluent-kafka", "epochguard.wire.drivers.confluent_kafka", "confluent-kafka>=2.16",
           importable="confluent_kafka", idempotent=("--option", "producer.enable.idempotence=true"),
           rack="client.rack", isolation="isolation.level", group=True),
    Client("kafka-python", "epochguard.wire.drivers.kafka_python", "kafka-python>=3", importable="kafka",
           idempotent=("--option", "producer.enable_idempotence=true"), rack="client_rack",
           isolation="isolation_level", group=True),
    Client("aiokafka", "epochguard.wire.drivers.aiokafka", "aiokafka>=0.14", importable="aiokafka",
           idempotent=("--option", "producer.enable_idempotence=true"), rack="client_rack",
           isolation="isolation_level", group=True),
    Client("kcat", "epochguard.wire.drivers.kcat", "kcat", executable="kcat", rack="client.rack",
           isolation="isolation.level", group=True),
    # Apache Kafka's own client, both consumer implementations; then the Go clients (toolchain.py).
    Client("java-classic", "epochguard.wire.drivers.java", "kafka-clients 4.4.0 (JDK 17 + Maven)",
           toolchain="java", args=("--variant", "classic"), idempotent=(), rack="client.rack",
           isolation="isolation.level", group=True),
    Client("java-consumer", "epochguard.wire.drivers.java", "kafka-clients 4.4.0 (JDK 17 + Maven)",
           toolchain="java", args=("--variant", "consumer"), idempotent=(), rack="client.rack",
           isolation="isolation.level",
           group_na="its AsyncKafkaConsumer joins a group only by KIP-848's ConsumerGroupHeartbeat, which serve "
                    "does not answer"),
    Client("franz-go", "epochguard.wire.drivers.go", "franz-go (Go toolchain)", toolchain="go",
           args=("--client", "franz-go"), idempotent=(), rack="rack", isolation="isolation.level",
           group=True),
    Client("sarama", "epochguard.wire.drivers.go", "IBM/sarama (Go toolchain)", toolchain="go",
           args=("--client", "sarama"), idempotent=("--option", "producer.idempotent=true"), rack="rack",
           isolation="isolation.level", group=True),
    Client("kafka-go", "epochguard.wire.drivers.go", "segmentio/kafka-go (Go toolchain)", toolchain="go",
           args=("--client", "kafka-go"), isolation="isolation.level", group=True),
    # epochguard's own client (epochguard.client), blocking and asyncio.
    Client("epochguard", "epochguard.wire.drivers.epochguard_client", "epochguard",
           idempotent=("--option", "producer.enable_idempotence=1"), rack="client_rack",
           isolation="isolation_level", group=True),
    Client("epochguard-asyncio", "epochguard.wire.drivers.epochguard_client", "epochguard", args=("--asyncio",),
           idempotent=("--option", "producer.enable_idempotence=1"), rack="client_rack",
           isolation="isolation_level", group=True),
)


def client(name: str) -> Client:
    for c in CLIENTS:
        if c.name == name:
            return c
    raise ValueError(f"unknown client {name!r}; known: {', '.join(c.name for c in CLIENTS)}")
