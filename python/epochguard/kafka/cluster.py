"""A real Apache Kafka KRaft cluster on 127.0.0.1: one controller, N brokers, a static quorum.

Mirrors what `bin/kafka-storage.sh format` and `bin/kafka-server-start.sh` do, from Maven jars: the
controller is formatted by `kafka.tools.StorageTool` (its bootstrap metadata carries the feature
levels, so KIP-966's `eligible.leader.replicas.version` is chosen there); a broker's format is only its
`meta.properties` (`MetaPropertiesEnsemble`, version 1: cluster.id, node.id, directory.id), written
here to save a JVM start per broker. Extra broker listeners (`listeners={"SASL_SSL": "SASL_SSL"}`: name ->
security protocol, a free port each; their `ssl.*` / `sasl.*` settings go in `broker_overrides`) serve
the client's TLS and SASL tests; `advertised_ports` advertises an extra listener at another port of
127.0.0.1 per broker (a proxy in front of it: clients bootstrapping there are sent to the proxy, the
brokers' own traffic stays on PLAINTEXT); SCRAM credentials (`scram=["SCRAM-SHA-256=[name=u,password=p]"]`) are
written into the bootstrap metadata at format, as `kafka-storage format --add-scram` does. Every node
is a `kafka.Kafka` JVM with a bounded heap, SerialGC and C1 only, logging to `<dir>/<node>/server.out`.
One controller and brokers 1..N (the simulator's broker ids): stopping two brokers never loses the quorum.

Readiness is polled, never slept: a node is up when its log says `Kafka Server started` (a broker
prints it only once the controller has unfenced it, BrokerServer.startup). Stops are SIGTERM (a
controlled shutdown: the controller drops the broker from every ISR at once), kills SIGKILL.

Admin requests go through kafka-python's `KafkaAdminClient` (CreateTopics with an explicit
assignment, Metadata for leader/epoch/ISR, ElectLeaders PREFERRED/UNCLEAN).
"""

from __future__ import annotations

import base64
import contextlib
import re
import shutil
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from epochguard.kafka.provision import find_java, kafka_jars

__all__ = ["KafkaCluster", "BrokerStartError", "PartitionState", "CONTROLLER_ID"]

CONTROLLER_ID = 0
_STARTED = "Kafka Server started"
_JVM_OPTS = ("-Xms64m", "-Xmx384m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-XX:-UsePerfData",
             "-Djava.awt.headless=true", "-Djava.net.preferIPv4Stack=true")
_LOG4J2 = """\
appender.out.type=Console
appender.out.name=OUT
appender.out.layout.type=PatternLayout
appender.out.layout.pattern=[%d] %p %m (%c)%n
rootLogger.level=INFO
rootLogger.appenderRef.out.ref=OUT
logger.state.name=state.change.logger
logger.state.level=WARN
logger.request.name=kafka.request.logger
logger.request.level=WARN
"""


class BrokerStartError(RuntimeError):
    """A node did not start (or stop) in time; the message carries its log's tail."""


@dataclass(frozen=True, slots=True)
class PartitionState:
    """One partition as the brokers' metadata (Metadata v9+) shows it."""

    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    error: int = 0


@dataclass
class _Node:
    node_id: int
    port: int
    dir: Path
    proc: subprocess.Popen[bytes] | None = None
    log_mark: int = 0  # the server.out size when the current process started

    @property
    def log(self) -> Path:
        return self.dir / "server.out"

    @property
    def data(self) -> Path:
        return self.dir / "data"


def _free_ports(n: int) -> list[int]:
    """n distinct free ports (bound together, so none is handed out twice); static voters need real ones."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _new_uuid() -> str:
    """A Kafka Uuid in its base64url form (Uuid.randomUuid: never one of the reserved low ids)."""
    # Kafka's Uuid.randomUuid() draws again when the text starts with "-": StorageTool's argument parser
    # would read such a cluster id as an option (1 start in 64 failed with "-t: expected one argument").
    while (text := base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")).startswith("-"):
        pass
    return text


@dataclass
class KafkaCluster:
    """`base_dir` holds one dir per node (`controller`, `broker-1`...). `elr` chooses KIP-966's
    `eligible.leader.replicas.version` at format time (1 is 4.4's default, 0 as Kafka's
    UncleanLeaderElectionTest)."""

    base_dir: Path
    brokers: int = 3
    elr: bool = False
    broker_overrides: Mapping[str, str] = field(default_factory=dict)
    listeners: Mapping[str, str] = field(default_factory=dict)  # extra broker listeners: name -> protocol
    # an extra listener's advertised port per broker, when not its own: name -> {broker id: port}
    advertised_ports: Mapping[str, Mapping[int, int]] = field(default_factory=dict)
    scram: Sequence[str] = ()  # StorageTool --add-scram arguments
    start_timeout_s: float = 180.0
    java: str = ""
    jars: Path | None = None

    def __post_init__(self) -> None:
        self.base_dir = Path(self.base_dir)
        self.java = self.java or find_java()
        self.jars = self.jars or kafka_jars()
        self.classpath = str(self.jars / "*")
        ports = _free_ports(self.brokers + 1 + self.brokers * len(self.listeners))
        self.nodes: dict[int, _Node] = {CONTROLLER_ID: _Node(CONTROLLER_ID, ports[0], self.base_dir / "controller")}
        for b in range(1, self.brokers + 1):
            self.nodes[b] = _Node(b, ports[b], self.base_dir / f"broker-{b}")
        extra = iter(ports[self.brokers + 1:])
        self.listener_ports: dict[str, dict[int, int]] = {
            name: {b: next(extra) for b in range(1, self.brokers + 1)} for name in self.listeners}
        if unknown := set(self.advertised_ports) - set(self.listeners):
            raise ValueError(f"advertised_ports names listeners that are not extra listeners: {sorted(unknown)}")
        self.cluster_id = _new_uuid()
        self._admin: Any = None
        self.bootstrap = ",".join(f"127.0.0.1:{self.nodes[b].port}" for b in self.broker_ids)

    @property
    def broker_ids(self) -> list[int]:
        return [b for b in self.nodes if b != CONTROLLER_ID]

    def address(self, broker_id: int) -> tuple[str, int]:
        return "127.0.0.1", self.nodes[broker_id].port

    def listener_bootstrap(self, name: str) -> str:
        """The bootstrap servers of the extra listener `name`."""
        return ",".join(f"127.0.0.1:{port}" for port in self.listener_ports[name].values())

    def data_dir(self, broker_id: int) -> Path:
        """The broker's `log.dirs` (one dir: its partitions, checkpoints, meta.properties)."""
        return self.nodes[broker_id].data

    # --- configuration and format ------------------------------------------------------------------
    def _properties(self, node: _Node) -> dict[str, str]:
        voters = f"{CONTROLLER_ID}@127.0.0.1:{self.nodes[CONTROLLER_ID].port}"
        common = {
            "node.id": str(node.node_id),
            "controller.quorum.voters": voters,
            "controller.listener.names": "CONTROLLER",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            "log.dirs": str(node.data),
            # the controller acts on these (KRaft): no leadership moves behind the tests' back
            "auto.leader.rebalance.enable": "false",
            "num.network.threads": "2",
            "num.io.threads": "2",
            "background.threads": "2",
        }
        if node.node_id == CONTROLLER_ID:
            return common | {
                "process.roles": "controller",
                "listeners": f"CONTROLLER://127.0.0.1:{node.port}",
                # two JVMs starting on 2 busy cores can pause a heartbeat past the 9 s default; and a
                # paused broker (pause_broker) stays unfenced, in its ISRs, for the 30 s of replica.lag.time.max.ms
                "broker.session.timeout.ms": "30000",
            }
        listeners = ",".join([f"PLAINTEXT://127.0.0.1:{node.port}"] + [
            f"{name}://127.0.0.1:{self.listener_ports[name][node.node_id]}" for name in self.listeners])
        advertised = ",".join([f"PLAINTEXT://127.0.0.1:{node.port}"] + [
            f"{name}://127.0.0.1:{self.advertised_ports.get(name, self.listener_ports[name])[node.node_id]}"
            for name in self.listeners])
        protocols = ",".join(["CONTROLLER:PLAINTEXT", "PLAINTEXT:PLAINTEXT"]
                             + [f"{name}:{protocol}" for name, protocol in self.listeners.items()])
        return common | {
            "process.roles": "broker",
            "listener.security.protocol.map": protocols,
            "listeners": listeners,
            "advertised.listeners": advertised,
            "inter.broker.listener.name": "PLAINTEXT",
            "auto.create.topics.enable": "false",
            "group.initial.rebalance.delay.ms": "0",
            "num.replica.fetchers": "1",
            "offsets.topic.replication.factor": str(min(3, self.brokers)),
            "offsets.topic.num.partitions": "1",
            "transaction.state.log.replication.factor": str(min(3, self.brokers)),
            "transaction.state.log.min.isr": "1",
            "transaction.state.log.num.partitions": "1",
            "share.coordinator.state.topic.replication.factor": str(min(3, self.brokers)),
            "share.coordinator.state.topic.min.isr": "1",
            "log.segment.bytes": str(1 << 20),
            # the root checkpoints are what a copied log dir (and the differential tests) read: keep them fresh
            "replica.high.watermark.checkpoint.interval.ms": "100",
            "log.flush.start.offset.checkpoint.interval.ms": "100",
        } | dict(self.broker_overrides)

    def _write_config(self, node: _Node) -> Path:
        node.dir.mkdir(parents=True, exist_ok=True)
        path = node.dir / "server.properties"
        path.write_text("".join(f"{k}={v}\n" for k, v in self._properties(node).items()))
        (node.dir / "log4j2.properties").write_text(_LOG4J2)
        return path

    def format(self) -> None:
        """Format every node's storage (fresh dirs); the controller with StorageTool."""
        ctl = self.nodes[CONTROLLER_ID]
        if self.base_dir.exists() and any(self.base_dir.iterdir()):
            raise FileExistsError(f"{self.base_dir} is not empty")
        config = self._write_config(ctl)
        cmd = [self.java, "-Xmx256m", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-cp", self.classpath,
               f"-Dlog4j2.configurationFile={ctl.dir / 'log4j2.properties'}",
               "kafka.tools.StorageTool", "format", "-t", self.cluster_id, "-c", str(config),
               "-f", f"eligible.leader.replicas.version={1 if self.elr else 0}"]
        for credential in self.scram:
            cmd += ["--add-scram", credential]
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        if out.returncode != 0:
            raise BrokerStartError(f"StorageTool format failed ({out.returncode}): {out.stdout}{out.stderr}")
        for b in self.broker_ids:
            node = self.nodes[b]
            self._write_config(node)
            node.data.mkdir(parents=True)
            meta = {"version": "1", "cluster.id": self.cluster_id, "node.id": str(b), "directory.id": _new_uuid()}
            (node.data / "meta.properties").write_text("".join(f"{k}={v}\n" for k, v in meta.items()))

    # --- processes ----------------------------------------------------------------------------------
    def _launch(self, node: _Node) -> None:
        if node.proc is not None and node.proc.poll() is None:
            raise RuntimeError(f"node {node.node_id} is already running")
        node.log_mark = node.log.stat().st_size if node.log.exists() else 0
        out = open(node.log, "ab")
        cmd = [self.java, *_JVM_OPTS, f"-Dkafka.logs.dir={node.dir}",
               f"-Dlog4j2.configurationFile={node.dir / 'log4j2.properties'}",
               "-cp", self.classpath, "kafka.Kafka", str(node.dir / "server.properties")]
        try:
            node.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         start_new_session=True)
        finally:
            out.close()

    def tail(self, node_id: int, lines: int = 40) -> str:
        node = self.nodes[node_id]
        if not node.log.exists():
            return "(no log)"
        return "\n".join(node.log.read_text(errors="replace").splitlines()[-lines:])

    def log_since_start(self, node_id: int) -> str:
        """What the node's current (or last) process logged."""
        node = self.nodes[node_id]
        with open(node.log, "rb") as f:
            f.seek(node.log_mark)
            return f.read().decode(errors="replace")

    def _await_started(self, node_ids: Sequence[int]) -> None:
        deadline = time.monotonic() + self.start_timeout_s
        pending = list(node_ids)
        while pending:
            for n in list(pending):
                node = self.nodes[n]
                assert node.proc is not None
                if _STARTED in self.log_since_start(n):
                    pending.remove(n)
                elif node.proc.poll() is not None:
                    raise BrokerStartError(f"node {n} exited with {node.proc.returncode} while starting:\n"
                                           f"{self.tail(n)}")
            if pending and time.monotonic() > deadline:
                raise BrokerStartError(f"node(s) {pending} not started after {self.start_timeout_s}s:\n"
                                       + "\n".join(f"--- node {n}:\n{self.tail(n)}" for n in pending))
            if pending:
                time.sleep(0.2)

    def start(self) -> None:
        """Format (if not yet) and start every node; returns once all have started."""
        if not (self.nodes[CONTROLLER_ID].data / "meta.properties").exists():
            self.format()
        for node in self.nodes.values():
            self._launch(node)
        self._await_started(list(self.nodes))
        self.wait_for(lambda: len(self.admin().describe_cluster()["brokers"]) == self.brokers,
                      what=f"{self.brokers} brokers registered")

    def start_broker(self, broker_id: int) -> None:
        """Start a stopped broker; returns once the controller has unfenced it."""
        self._launch(self.nodes[broker_id])
        self._await_started([broker_id])

    def stop_broker(self, broker_id: int, timeout_s: float = 120.0) -> None:
        """SIGTERM: a controlled shutdown (the controller moves leadership and shrinks ISRs first)."""
        self._signal(broker_id, signal.SIGTERM, timeout_s)

    def kill_broker(self, broker_id: int) -> None:
        """SIGKILL: an unclean shutdown (fenced after broker.session.timeout.ms)."""
        self._signal(broker_id, signal.SIGKILL, 30.0)

    def pause_broker(self, broker_id: int) -> None:
        """SIGSTOP: the broker neither fetches, serves nor heartbeats, yet stays registered and in every
        ISR until its leaders' `replica.lag.time.max.ms` (30 s) or the controller's session timeout
        passes (a follower that fell silent; KIP-207's lagging new leader needs one)."""
        self._signal_only(broker_id, signal.SIGSTOP)

    def resume_broker(self, broker_id: int) -> None:
        """SIGCONT after `pause_broker`."""
        self._signal_only(broker_id, signal.SIGCONT)

    def _signal_only(self, node_id: int, sig: signal.Signals) -> None:
        proc = self.nodes[node_id].proc
        if proc is None or proc.poll() is not None:
            raise RuntimeError(f"node {node_id} is not running")
        proc.send_signal(sig)

    def running(self, node_id: int) -> bool:
        proc = self.nodes[node_id].proc
        return proc is not None and proc.poll() is None

    def _signal(self, node_id: int, sig: signal.Signals, timeout_s: float) -> None:
        proc = self.nodes[node_id].proc
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(sig)
        try:
            proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(30)
            raise BrokerStartError(f"node {node_id} ignored {sig.name} for {timeout_s}s; killed:\n"
                                   f"{self.tail(node_id)}") from None

    def close(self, timeout_s: float = 30.0) -> None:
        """Stop everything: the brokers (SIGTERM, together), then the controller, which their controlled
        shutdowns need; whatever lingers past `timeout_s` is killed."""
        self._drop_admin()
        for group in (self.broker_ids, [CONTROLLER_ID]):
            procs = [p for n in group if (p := self.nodes[n].proc) is not None and p.poll() is None]
            for proc in procs:
                proc.send_signal(signal.SIGCONT)  # a paused broker would never see the SIGTERM
                proc.send_signal(signal.SIGTERM)
            deadline = time.monotonic() + timeout_s
            for proc in procs:
                try:
                    proc.wait(max(0.1, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(30)

    def __enter__(self) -> KafkaCluster:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- admin --------------------------------------------------------------------------------------
    def admin(self) -> Any:
        if self._admin is None:
            from kafka.admin import KafkaAdminClient

            self._admin = KafkaAdminClient(bootstrap_servers=self.bootstrap, client_id="epochguard-kafka-control",
                                           request_timeout_ms=60000)
        return self._admin

    @staticmethod
    def wait_for(predicate: Callable[[], Any], what: str, timeout_s: float = 90.0, interval_s: float = 0.2) -> Any:
        """Poll `predicate` until truthy (exceptions count as not yet); its value is returned."""
        deadline = time.monotonic() + timeout_s
        last: BaseException | None = None
        while True:
            try:
                value = predicate()
                if value:
                    return value
            except Exception as e:
                last = e
            if time.monotonic() > deadline:
                raise TimeoutError(f"timed out after {timeout_s}s waiting for {what}"
                                   + (f" (last error: {last!r})" if last else ""))
            time.sleep(interval_s)

    def create_topic(self, topic: str, assignment: Mapping[int, Sequence[int]],
                     configs: Mapping[str, str] | None = None) -> None:
        """CreateTopics with an explicit assignment; returns once every partition has its first leader."""
        def create(admin: Any) -> None:
            from kafka.errors import TopicAlreadyExistsError

            with contextlib.suppress(TopicAlreadyExistsError):  # a retry after an answer lost on the way
                admin.create_topics({topic: {"assignments": {p: list(r) for p, r in assignment.items()},
                                             "configs": dict(configs or {})}}, timeout_ms=60000)
        # Through a new admin if the last one's controller is gone (a test before stopped brokers).
        self._admin_retry(create, "CreateTopics")
        for p, replicas in assignment.items():
            first = tuple(replicas)

            def led(s: PartitionState, first: tuple[int, ...] = first) -> bool:
                return s.leader == first[0] and s.isr == first
            self.wait_partition(topic, p, led, f"{topic}-{p} led by {first[0]} with ISR {list(first)}")

    def partition(self, topic: str, partition: int) -> PartitionState | None:
        """The partition as the brokers' metadata shows it (None while the topic is unknown)."""
        try:
            desc = self.admin().describe_topics([topic])
        except Exception:
            self._drop_admin()
            raise
        for t in desc:
            for p in t.get("partitions", ()):  # MetadataResponse's schema names
                if p["partition_index"] == partition:
                    return PartitionState(p["leader_id"], p["leader_epoch"], tuple(p["replica_nodes"]),
                                          tuple(p["isr_nodes"]), p["error_code"])
        return None

    def wait_partition(self, topic: str, partition: int, predicate: Callable[[PartitionState], bool], what: str,
                       timeout_s: float = 90.0) -> PartitionState:
        state: list[PartitionState | None] = [None]

        def check() -> PartitionState | None:
            state[0] = s = self.partition(topic, partition)
            return s if s is not None and predicate(s) else None

        try:
            return self.wait_for(check, what, timeout_s)
        except TimeoutError as e:
            raise TimeoutError(f"{e}; last seen {state[0]}") from None

    def elect_leaders(self, topic: str, partition: int, unclean: bool) -> None:
        """ElectLeaders (KIP-460) for one partition: type UNCLEAN (1) or PREFERRED (0). ELECTION_NOT_NEEDED
        (a leader is there already) is not an error."""
        self._admin_retry(lambda admin: admin.elect_leaders(1 if unclean else 0, {topic: [partition]},
                                                            timeout_ms=60000), "ElectLeaders")

    def reorder_replicas(self, topic: str, partition: int, replicas: Sequence[int]) -> None:
        """AlterPartitionReassignments to the same replicas in another order (the first is the preferred
        leader); nothing moves, so it completes at once. Returns once the metadata shows the order."""
        from kafka import TopicPartition as KafkaTopicPartition

        order = tuple(replicas)
        result = self._admin_retry(lambda admin: admin.alter_partition_reassignments(
            {KafkaTopicPartition(topic, partition): list(order)}, timeout_ms=60000), "AlterPartitionReassignments")
        if isinstance(result, dict) and any(err is not None for err in result.values()):
            raise RuntimeError(f"AlterPartitionReassignments {topic}-{partition} -> {list(order)}: {result}")
        self.wait_partition(topic, partition, lambda s: s.replicas == order,
                            f"{topic}-{partition} replicas {list(order)}")

    def delete_records(self, topic: str, partition: int, before: int) -> None:
        """DeleteRecords: the log start offset raised to `before` (safe to repeat). Through a new admin if
        the last one's broker registry is stale (a test before stopped and started brokers:
        "UnknownBrokerIdError: 1" for the partition's leader)."""
        from kafka import TopicPartition as KafkaTopicPartition

        self._admin_retry(lambda admin: admin.delete_records({KafkaTopicPartition(topic, partition): before},
                                                             timeout_ms=60000), "DeleteRecords")

    def _admin_retry(self, call: Callable[[Any], Any], what: str) -> Any:
        """A request to the controller: kafka-python's admin keeps the controller id (in KRaft a broker that
        forwards) it first learnt, and fails while that broker is down; a new admin asks again."""
        def attempt() -> Any:
            try:
                return call(self.admin()) or True
            except Exception:
                self._drop_admin()
                raise
        return self.wait_for(attempt, what, timeout_s=60.0)

    def _drop_admin(self) -> None:
        """After a failed admin request the next one starts a new admin, which asks the bootstrap addresses:
        kafka-python's keeps asking the brokers its last Metadata answer named (no KIP-899 rebootstrap), so
        once those stopped (2 and 3 down, then 1: `consecutive-unclean`) it would fail ever after, every later
        test on the cluster with it ("NodeNotReadyError: 3")."""
        if self._admin is not None:
            with contextlib.suppress(Exception):
                self._admin.close()
        self._admin = None

    def describe_partition(self, topic: str, partition: int) -> dict[str, Any]:
        """DescribeTopicPartitions (KIP-966): the partition with its eligible leader replicas
        (`eligible_leader_replicas`, `last_known_elr`), which Metadata does not carry."""
        for t in self.admin().describe_topic_partitions([topic])["topics"]:
            for p in t["partitions"]:
                if p["partition_index"] == partition:
                    return dict(p)
        raise KeyError(f"{topic}-{partition}")

    def set_elr(self, enabled: bool) -> None:
        """Turn KIP-966's eligible leader replicas on or off (UpdateFeatures on
        `eligible.leader.replicas.version`: UPGRADE to 1, or SAFE_DOWNGRADE to 0 as Kafka's
        UncleanLeaderElectionTest does); returns once the brokers' DescribeFeatures shows it."""
        level = 1 if enabled else 0
        update = (1, 1) if enabled else (2, 0)  # (UpdateFeatureType.UPGRADE | SAFE_DOWNGRADE, level)
        result = self._admin_retry(lambda admin: admin.update_features({"eligible.leader.replicas.version": update}),
                                   "UpdateFeatures")
        if any(v != "OK" for v in result.values()):
            raise RuntimeError(f"UpdateFeatures eligible.leader.replicas.version={level}: {result}")
        self.wait_for(lambda: self.elr_level() == level, f"eligible.leader.replicas.version {level}")

    def elr_level(self) -> int:
        """The finalized `eligible.leader.replicas.version` (0 when not finalized)."""
        # kafka-python 3.0.12 answers {feature: {"supported": (min, max), "finalized": (min, max)}}
        # (its docstring describes another shape)
        finalized = self.admin().describe_features().get("eligible.leader.replicas.version", {}).get("finalized")
        return 0 if finalized is None else int(finalized[1])

    # --- files --------------------------------------------------------------------------------------
    def copy_data_dir(self, broker_id: int, dest: Path, topics: Sequence[str] | None = None,
                      indexes: bool = False) -> Path:
        """Copy a broker's log dir: its root files (meta.properties, the offset checkpoints) and the
        partition dirs of `topics` (all if None). The offset and time indexes are left out unless
        `indexes`: an active segment's are preallocated (10 MiB, sparse) and Kafka rebuilds them on
        recovery; the audit reads segments and checkpoints. Copy a running broker's dir only while
        nothing writes to those partitions."""
        src = self.data_dir(broker_id)
        dest = Path(dest)
        dest.mkdir(parents=True, exist_ok=True)
        skip = ("*.tmp",) if indexes else ("*.tmp", "*.index", "*.timeindex")
        for entry in sorted(src.iterdir()):
            if entry.is_dir():
                if topics is not None and not any(re.fullmatch(rf"{re.escape(t)}-\d+", entry.name) for t in topics):
                    continue
                shutil.copytree(entry, dest / entry.name, ignore=shutil.ignore_patterns(*skip))
            elif entry.name != ".lock" and not entry.name.endswith(".tmp"):  # .tmp: a checkpoint being replaced
                with contextlib.suppress(FileNotFoundError):
                    shutil.copy2(entry, dest / entry.name)
        return dest


def iter_partition_dirs(data_dir: Path, topic: str) -> Iterator[Path]:
    yield from sorted(p for p in Path(data_dir).iterdir() if re.fullmatch(rf"{re.escape(topic)}-\d+", p.name))

