"""The differential harness: one script, two backends (a real Kafka cluster, epochguard's simulator).

Every request a script sends is a kafka-python protocol message (an encoder independent of ours),
encoded once to a frame. To real Kafka the frame goes over a socket; to the simulator it goes
through epochguard's own wire codec (`epochguard.wire.codec.decode_request`) into the sans-IO
`WireCluster` that `epochguard serve` runs, and the answer comes back through `encode_response`. So
both backends answer the very same bytes, and both answers are decoded by kafka-python.

Faults: `stop` is SIGTERM on Kafka (a controlled shutdown) and a crash in the simulator (which has no
controlled shutdown: its controller drops the broker from the ISR when the session times out);
`elect_unclean` / `elect_preferred` are ElectLeaders requests of type UNCLEAN / PREFERRED on both;
`pause` is SIGSTOP on Kafka (the broker neither fetches nor heartbeats, and stays in every ISR until
`replica.lag.time.max.ms` or the controller's session timeout) and, in the simulator, the broker cut off
from the other brokers but not from the controller (`Isolate`); `resume` is SIGCONT / `Heal`. `replica(b)` reads what a replica
holds: on Kafka from its partition dir (`PartitionLog.open`) and root checkpoints, in the simulator
from its log.
"""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from kafka.protocol.admin import ElectLeadersRequest, ElectLeadersResponse
from kafka.protocol.consumer.fetch import FetchRequest, FetchResponse
from kafka.protocol.consumer.offsets import (
    ListOffsetsRequest,
    ListOffsetsResponse,
    OffsetForLeaderEpochRequest,
    OffsetForLeaderEpochResponse,
)
from kafka.protocol.metadata.metadata import MetadataRequest, MetadataResponse
from kafka.protocol.producer.produce import ProduceRequest, ProduceResponse

from epochguard._core import encode_batch
from epochguard.kafka import KafkaCluster, PartitionState
from epochguard.protocol.messages import TxnMarker, WriteTxnMarkersRequest, WriteTxnMarkersResponse
from epochguard.sim.faults import Crash, ElectUnclean, Heal, Isolate, PreferredElection, Restart
from epochguard.sim.network import broker_node
from epochguard.storage.log import PartitionLog, control_type
from epochguard.storage.logdir import read_offset_checkpoint
from epochguard.storage.logdir_format import LEADER_EPOCH_CHECKPOINT, parse_leader_epoch_checkpoint
from epochguard.types import TopicPartition
from epochguard.wire.endpoint import Endpoint
from epochguard.wire.engine import Connection, WireCluster
from epochguard.wire.scenarios import BASE, INPUT, Stage, WireScenario

# Versions inside both Kafka 4.4's and epochguard's codec's ranges, each with every field the scripts use
PRODUCE_V, FETCH_V, LIST_OFFSETS_V, OFFSET_FOR_LEADER_EPOCH_V, METADATA_V = 9, 12, 7, 4, 12
ELECT_LEADERS_V = 2
_RESPONSES = {ElectLeadersRequest: ElectLeadersResponse, ProduceRequest: ProduceResponse, FetchRequest: FetchResponse, ListOffsetsRequest: ListOffsetsResponse,
              OffsetForLeaderEpochRequest: OffsetForLeaderEpochResponse, MetadataRequest: MetadataResponse}
EARLIEST, LATEST = -2, -1


def _response_class(request: Any) -> Any:
    for req, resp in _RESPONSES.items():
        if isinstance(request, req):
            return resp
    raise TypeError(type(request))


def encode(request: Any, correlation_id: int) -> bytes:
    """The request frame without its size prefix."""
    request.with_header(correlation_id=correlation_id, client_id="epochguard-differential")
    return bytes(request.encode(header=True))


def decode(request: Any, frame: bytes) -> Any:
    return _response_class(request).decode(frame, version=request.API_VERSION, header=True)


# --- requests -------------------------------------------------------------------------------------------
def produce(topic: str, partition: int, batch: bytes, acks: int = -1, transactional_id: str | None = None) -> Any:
    t = ProduceRequest.TopicProduceData
    return ProduceRequest[PRODUCE_V](
        transactional_id=transactional_id, acks=acks, timeout_ms=30000,
        topic_data=[t(name=topic, partition_data=[t.PartitionProduceData(index=partition, records=batch)])])


def offset_for_leader_epoch(topic: str, partition: int, leader_epoch: int, current_leader_epoch: int = -1) -> Any:
    t = OffsetForLeaderEpochRequest.OffsetForLeaderTopic
    return OffsetForLeaderEpochRequest[OFFSET_FOR_LEADER_EPOCH_V](replica_id=-1, topics=[t(
        topic=topic, partitions=[t.OffsetForLeaderPartition(partition=partition, current_leader_epoch=current_leader_epoch,
                                                            leader_epoch=leader_epoch)])])


def list_offsets(topic: str, partition: int, timestamp: int, isolation_level: int = 0,
                 current_leader_epoch: int = -1) -> Any:
    t = ListOffsetsRequest.ListOffsetsTopic
    return ListOffsetsRequest[LIST_OFFSETS_V](replica_id=-1, isolation_level=isolation_level, topics=[t(
        name=topic, partitions=[t.ListOffsetsPartition(partition_index=partition, current_leader_epoch=current_leader_epoch,
                                                       timestamp=timestamp)])])


def fetch(topic: str, partition: int, offset: int, last_fetched_epoch: int = -1, current_leader_epoch: int = -1,
          isolation_level: int = 0) -> Any:
    t = FetchRequest.FetchTopic
    return FetchRequest[FETCH_V](
        replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, isolation_level=isolation_level, session_id=0,
        session_epoch=-1, rack_id="", forgotten_topics_data=[],
        topics=[t(topic=topic, partitions=[t.FetchPartition(
            partition=partition, current_leader_epoch=current_leader_epoch, fetch_offset=offset,
            last_fetched_epoch=last_fetched_epoch, log_start_offset=-1, partition_max_bytes=1 << 20)])])


def metadata(topic: str) -> Any:
    t = MetadataRequest.MetadataRequestTopic
    return MetadataRequest[METADATA_V](topics=[t(topic_id=None, name=topic)], allow_auto_topic_creation=False,
                                       include_topic_authorized_operations=False)


def elect_leaders(topic: str, partition: int, unclean: bool) -> Any:
    r = ElectLeadersRequest[ELECT_LEADERS_V]
    return r(election_type=1 if unclean else 0, timeout_ms=60000,
             topic_partitions=[r.TopicPartitions(topic=topic, partitions=[partition])])


def records(tag: str, n: int, ts: int) -> bytes:
    """A plain (non-idempotent) v2 batch of n records with CreateTime timestamps ts, ts+1, ..."""
    return encode_batch([(f"{tag}-{i}".encode(), f"{tag}-value-{i}".encode(), [], ts + i) for i in range(n)],
                        base_timestamp=ts)


# --- what a replica holds -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Replica:
    epochs: tuple[tuple[int, int], ...]  # leader-epoch-checkpoint entries
    log_start: int
    log_end: int
    high_watermark: int
    batches: tuple[tuple[int, int, int, int], ...]  # (base offset, last offset, partition leader epoch, crc)

    @classmethod
    def of(cls, log: PartitionLog, high_watermark: int) -> Replica:
        return cls(tuple(log.leader_epoch_cache.entries()), log.log_start_offset, log.log_end_offset, high_watermark,
                   tuple((b.base_offset, b.last_offset, b.partition_leader_epoch, b.crc) for b in log.batches()))


@dataclass(frozen=True)
class TxnReplica:
    """What a replica holds, transactions included (script 5): every batch's (base offset, last offset,
    partition leader epoch, producer id, producer epoch, transactional, control type (0 ABORT, 1 COMMIT,
    None: data), CRC); a marker's CRC is None, as it covers the marker's timestamp, the leader's clock at
    the write. `aborted` is the transaction index: (producer id, first offset, last offset) per aborted
    transaction (Kafka's `.txnindex` files; the simulator's log)."""

    epochs: tuple[tuple[int, int], ...]
    log_start: int
    log_end: int
    high_watermark: int
    batches: tuple[tuple[int, int, int, int, int, bool, int | None, int | None], ...]
    aborted: tuple[tuple[int, int, int], ...]

    @classmethod
    def of(cls, log: PartitionLog, high_watermark: int, epochs: tuple[tuple[int, int], ...],
           aborted: Sequence[tuple[int, int, int]]) -> TxnReplica:
        rows = []
        for b in log.batches():
            control = control_type(b) if b.is_control else None
            rows.append((b.base_offset, b.last_offset, b.partition_leader_epoch, b.producer_id, b.producer_epoch,
                         b.is_transactional, control, None if b.is_control else b.crc))
        return cls(epochs, log.log_start_offset, log.log_end_offset, high_watermark, tuple(rows), tuple(aborted))


def read_txn_index(partition_dir: Path) -> list[tuple[int, int, int, int]]:
    """Kafka's transaction index files of a partition dir, in segment order: (producer id, first offset,
    last offset, last stable offset) per entry (`AbortedTxn`: version int16 0, then four int64)."""
    out = []
    for path in sorted(partition_dir.glob("*.txnindex")):
        data = path.read_bytes()
        for pos in range(0, len(data) - len(data) % 34, 34):
            version, pid, first, last, lso = struct.unpack_from(">hqqqq", data, pos)
            if version != 0:
                raise ValueError(f"{path}: transaction index entry version {version}")
            out.append((pid, first, last, lso))
    return out


class TxnProducer:
    """A transactional producer of script 5, one partition: `send` n records (timestamps ts, ts+1, ...)
    in the open transaction, acknowledged before it returns; `end` the transaction."""

    def begin(self) -> None: ...
    def send(self, tag: str, n: int, ts: int) -> None: ...
    def end(self, commit: bool) -> None: ...
    def close(self) -> None: ...


class KafkaTxnProducer(TxnProducer):
    """confluent-kafka's transactional producer (librdkafka): InitProducerId, AddPartitionsToTxn, acks=all
    idempotent batches, EndTxn; the coordinator writes the markers."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        import confluent_kafka as ck

        self.topic = topic
        self._p = ck.Producer({"bootstrap.servers": bootstrap, "transactional.id": f"epochguard-{topic}",
                               "linger.ms": 50, "log_level": 3, "transaction.timeout.ms": 120000})
        self._p.init_transactions(60)

    def begin(self) -> None:
        self._p.begin_transaction()

    def send(self, tag: str, n: int, ts: int) -> None:
        errors: list[Any] = []
        for i in range(n):
            self._p.produce(self.topic, key=f"{tag}-{i}".encode(), value=f"{tag}-value-{i}".encode(), partition=0,
                            timestamp=ts + i, on_delivery=lambda err, _msg: errors.append(err) if err else None)
        if self._p.flush(60) or errors:
            raise RuntimeError(f"transactional produce of {tag}: {errors or 'not delivered in 60 s'}")

    def end(self, commit: bool) -> None:
        if commit:
            self._p.commit_transaction(60)
        else:
            self._p.abort_transaction(60)

    def close(self) -> None:
        self._p.flush(10)


class Observer:
    """Hooks into a script run (the real-log-dir audit watches the Kafka run with them)."""

    def lost_records_written(self, b: Backend, log_end: int) -> None: ...
    def leader_stopped(self, b: Backend) -> None: ...
    def elected(self, b: Backend) -> None: ...
    def settled(self, b: Backend, log_end: int) -> None: ...


# --- backends -------------------------------------------------------------------------------------------
class Backend:
    name: str
    topic: str

    def send(self, broker: int, request: Any) -> Any: ...
    def stop(self, broker: int) -> None: ...
    def start(self, broker: int) -> None: ...
    def elect_unclean(self) -> None: ...
    def elect_preferred(self) -> None: ...
    def prefer(self, broker: int) -> None: ...
    def pause(self, broker: int) -> None: ...
    def resume(self, broker: int) -> None: ...
    def wait(self, predicate: Callable[[PartitionState], bool], what: str) -> PartitionState: raise NotImplementedError
    def replica(self, broker: int) -> Replica: raise NotImplementedError
    def settle(self, predicate: Callable[[], bool], what: str) -> None: ...

    def txn_replica(self, broker: int) -> TxnReplica: raise NotImplementedError
    def transactional_producer(self) -> TxnProducer: raise NotImplementedError

    def produce(self, broker: int, batch: bytes, acks: int = -1) -> tuple[int, int]:
        """(error code, base offset) of a produce of `batch` to `broker` (acks=all unless told)."""
        resp = self.send(broker, produce(self.topic, 0, batch, acks))
        p = resp.responses[0].partition_responses[0]
        return p.error_code, p.base_offset


class KafkaBackend(Backend):
    name = "kafka"

    def __init__(self, cluster: KafkaCluster, topic: str, assignment: Sequence[int]) -> None:
        self.cluster = cluster
        self.topic = topic
        self._socks: dict[int, socket.socket] = {}
        self._cid = 0
        self.paused: set[int] = set()
        # retention.ms=-1: the records carry fixed 2023 timestamps (the same bytes on both backends), which
        # the 7-day time retention would delete at its next 5-minute check (seen: the new leader's log
        # start jumping to its log end between two produces)
        cluster.create_topic(topic, {0: list(assignment)}, {"min.insync.replicas": "1", "retention.ms": "-1"})

    def send(self, broker: int, request: Any) -> Any:
        self._cid += 1
        frame = encode(request, self._cid)
        for attempt in (0, 1):  # a broker restarted since: reconnect once
            sock = self._socks.get(broker)
            try:
                if sock is None:
                    sock = self._socks[broker] = socket.create_connection(self.cluster.address(broker), timeout=60)
                sock.sendall(struct.pack(">i", len(frame)) + frame)
                size = struct.unpack(">i", _recv(sock, 4))[0]
                return decode(request, _recv(sock, size))
            except OSError:
                sock = self._socks.pop(broker, None)
                if sock is not None:
                    sock.close()
                if attempt:
                    raise
        raise AssertionError("unreachable")

    def close(self) -> None:
        for b in list(self.paused):  # never leave a broker stopped behind a failed script
            self.resume(b)
        for s in self._socks.values():
            s.close()
        self._socks.clear()

    def stop(self, broker: int) -> None:
        sock = self._socks.pop(broker, None)
        if sock is not None:
            sock.close()
        self.cluster.stop_broker(broker)

    def start(self, broker: int) -> None:
        self.cluster.start_broker(broker)

    def elect_unclean(self) -> None:
        self._elect(unclean=True)

    def elect_preferred(self) -> None:
        self._elect(unclean=False)

    def _elect(self, unclean: bool) -> None:
        if not self.paused:
            self.cluster.elect_leaders(self.topic, 0, unclean=unclean)
            return
        # kafka-python's admin sends ElectLeaders to the broker Metadata names controller, in KRaft a random
        # one: maybe the paused broker (a 60 s time-out). Any running broker forwards it to the controller.
        r = self.send(self._responsive(), elect_leaders(self.topic, 0, unclean))
        codes = {p.error_code for t in r.replica_election_results for p in t.partition_result}
        if r.error_code or codes - {0, 84}:  # 84: ELECTION_NOT_NEEDED
            raise RuntimeError(f"ElectLeaders {self.topic}-0: {r}")

    def _responsive(self) -> int:
        return next(b for b in self.cluster.broker_ids if self.cluster.running(b) and b not in self.paused)

    def _state(self) -> PartitionState | None:
        """The partition as a running, unpaused broker's Metadata answer shows it (the admin's own requests
        may go to a paused broker)."""
        p = self.send(self._responsive(), metadata(self.topic)).topics[0].partitions[0]
        if p.error_code:
            return None
        return PartitionState(p.leader_id, p.leader_epoch, tuple(p.replica_nodes), tuple(p.isr_nodes))

    def prefer(self, broker: int) -> None:
        """Make `broker` the preferred (first) replica: a reassignment that only reorders the replicas."""
        state = self.cluster.partition(self.topic, 0)
        assert state is not None
        self.cluster.reorder_replicas(self.topic, 0, [broker, *(r for r in state.replicas if r != broker)])

    def pause(self, broker: int) -> None:
        self.cluster.pause_broker(broker)
        self.paused.add(broker)

    def resume(self, broker: int) -> None:
        self.cluster.resume_broker(broker)
        self.paused.discard(broker)

    def wait(self, predicate: Callable[[PartitionState], bool], what: str) -> PartitionState:
        """The state as the brokers' metadata shows it, once every running (not paused) replica's own
        Metadata answer agrees on leader and epoch (the admin may ask a broker that learnt it first)."""
        if self.paused:
            def check() -> PartitionState | None:
                st = self._state()
                return st if st is not None and predicate(st) else None
            state = self.cluster.wait_for(check, what)
        else:
            state = self.cluster.wait_partition(self.topic, 0, predicate, what)

        def agreed() -> bool:
            for b in state.replicas:
                if self.cluster.running(b) and b not in self.paused:
                    p = self.send(b, metadata(self.topic)).topics[0].partitions[0]
                    if (p.leader_id, p.leader_epoch) != (state.leader, state.leader_epoch):
                        return False
            return True
        self.cluster.wait_for(agreed, f"{what}: every replica's metadata")
        return state

    def replica(self, broker: int) -> Replica:
        # a paused broker's files are read all the same (what it held when it stopped)
        root = self.cluster.data_dir(broker)
        log = PartitionLog.open(root / f"{self.topic}-0", write_through=False)
        hw = read_offset_checkpoint(root / "replication-offset-checkpoint").get(TopicPartition(self.topic, 0), 0)
        # the checkpoint file as written: opening the log truncates the cache to its end, as Kafka's
        # recovery does, and drops a new leader's entry at its log end before it has appended anything
        epochs = parse_leader_epoch_checkpoint((root / f"{self.topic}-0" / LEADER_EPOCH_CHECKPOINT).read_bytes())
        return replace(Replica.of(log, hw), epochs=tuple(epochs))

    def settle(self, predicate: Callable[[], bool], what: str) -> None:
        self.cluster.wait_for(predicate, what)

    def txn_replica(self, broker: int) -> TxnReplica:
        r = self.replica(broker)
        part = self.cluster.data_dir(broker) / f"{self.topic}-0"
        aborted = [(pid, first, last) for pid, first, last, _ in read_txn_index(part)]
        return TxnReplica.of(PartitionLog.open(part, write_through=False), r.high_watermark, r.epochs, aborted)

    def transactional_producer(self) -> TxnProducer:
        return KafkaTxnProducer(self.cluster.bootstrap, self.topic)

    def written(self, broker: int) -> list[tuple[Any, ...]]:
        """What the producer and the coordinator wrote, in log order, for the simulator to replay:
        ("data", the batch's bytes, its record count) and ("marker", (producer id, producer epoch,
        commit, coordinator epoch))."""
        log = PartitionLog.open(self.cluster.data_dir(broker) / f"{self.topic}-0", write_through=False)
        out: list[tuple[Any, ...]] = []
        for b in log.batches():
            if b.is_control:
                rec = b.records()[0]
                assert rec.value is not None
                coordinator_epoch = struct.unpack_from(">hi", rec.value)[1]
                out.append(("marker", (b.producer_id, b.producer_epoch, control_type(b) == 1, coordinator_epoch)))
            else:
                out.append(("data", log.read(b.base_offset, upper_bound=b.last_offset + 1), b.records_count))
        return out


def _recv(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("connection closed")
        buf += chunk
    return bytes(buf)


class SimBackend(Backend):
    """The simulated cluster `epochguard serve` runs, brokers 1..3, one partition of `input` on
    `assignment`, min.insync.replicas=1, no simulated clients; time only moves in `wait`/`settle`/`send`."""

    name = "sim"
    max_steps = 20_000

    def __init__(self, assignment: Sequence[int], seed: int = 0, **config: Any) -> None:
        self.topic = INPUT
        cfg = replace(BASE, brokers=3, replication_factor=len(assignment), min_insync_replicas=1, producers=(),
                      consumers=0, monitor=False, **config)
        assert tuple(cfg.assignment()[TopicPartition(INPUT, 0)]) == tuple(assignment), cfg.assignment()
        scenario = WireScenario("differential", cfg, (Stage("ready"),), "differential test")
        self.wire = WireCluster(scenario, seed, {b: ("127.0.0.1", 9000 + b) for b in (1, 2, 3)})
        self.endpoint = Endpoint(self.wire)
        self._conns: dict[int, Connection] = {}
        self._cid = 0
        self.preferred: int | None = None
        self.tp = TopicPartition(INPUT, 0)
        self.settle(self.wire.ready, "every partition led")

    def send(self, broker: int, request: Any) -> Any:
        conn = self._conns.get(broker)
        if conn is None or conn.closed:
            conn = self.endpoint.connect(broker)
            if conn is None:
                raise ConnectionRefusedError(f"sim broker {broker} is down")
            self._conns[broker] = conn
        self._cid += 1
        self.endpoint.receive(conn, encode(request, self._cid))
        for _ in range(self.max_steps):
            for c, frame in self.endpoint.outgoing():
                if c is conn:
                    return decode(request, frame[4:])
            if conn.closed:
                raise ConnectionError(f"sim broker {broker} closed the connection")
            self.endpoint.step()
        raise TimeoutError(f"sim broker {broker} did not answer {type(request).__name__}")

    def stop(self, broker: int) -> None:
        self.endpoint.fire(Crash(broker))

    def start(self, broker: int) -> None:
        self.endpoint.fire(Restart(broker))
        self.settle(lambda: broker in self.wire.cluster.controller.broker_epochs, f"broker {broker} registered")

    def elect_unclean(self) -> None:
        self.endpoint.fire(ElectUnclean(self.tp))

    def elect_preferred(self) -> None:
        first = self.preferred or self.wire.cluster.controller.partitions[self.tp].replicas[0]
        self.endpoint.fire(PreferredElection(self.tp, first))

    def prefer(self, broker: int) -> None:
        self.preferred = broker  # the simulated controller elects any in-sync replica it is told

    def pause(self, broker: int) -> None:
        self.endpoint.fire(Isolate(broker))

    def resume(self, broker: int) -> None:
        self.endpoint.fire(Heal(broker_node(broker)))

    def state(self) -> PartitionState:
        st = self.wire.cluster.controller.partitions[self.tp]
        return PartitionState(st.leader, st.leader_epoch, tuple(st.replicas), tuple(st.isr))

    def wait(self, predicate: Callable[[PartitionState], bool], what: str) -> PartitionState:
        """The controller's state, once every alive replica has applied it (as Kafka's metadata shows)."""
        def applied() -> bool:
            st = self.state()
            return predicate(st) and all(self._known_epoch(b) == st.leader_epoch
                                         for b in st.replicas if self.wire.cluster.brokers[b].alive)
        self.settle(applied, what)
        return self.state()

    def _known_epoch(self, broker: int) -> int | None:
        partition = self.wire.cluster.brokers[broker].manager.partitions.get(self.tp)
        return None if partition is None else partition.leader_epoch

    def replica(self, broker: int) -> Replica:
        log = self.wire.cluster.log(broker, self.tp)
        return Replica.of(log, log.high_watermark)

    def txn_replica(self, broker: int) -> TxnReplica:
        log = self.wire.cluster.log(broker, self.tp)
        return TxnReplica.of(log, log.high_watermark, tuple(log.leader_epoch_cache.entries()),
                             [(t.producer_id, t.first_offset, t.last_offset) for t in log.aborted_transactions])

    def transactional_producer(self) -> TxnProducer:
        return ReplayTxnProducer(self, list(self.replay))

    replay: Sequence[tuple[Any, ...]] = ()  # script 5: what Kafka's producer and coordinator wrote

    def write_marker(self, producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int) -> None:
        """The coordinator's WriteTxnMarkers to the partition's leader (the simulator has no transaction
        coordinator and serve's codec no WriteTxnMarkers: handed to the leader's ReplicaManager, as
        Kafka's marker channel does), then until the ISR has it."""
        leader = self.state().leader
        manager = self.wire.cluster.brokers[leader].manager
        marker = TxnMarker(producer_id, producer_epoch, commit, coordinator_epoch, self.topic, 0)
        log = self.wire.cluster.log(leader, self.tp)
        end = log.log_end_offset
        response = manager.handle(leader, WriteTxnMarkersRequest((marker,)), self.wire.now_ms)
        if isinstance(response, WriteTxnMarkersResponse) and response.partitions[0].error_code:
            raise RuntimeError(f"sim WriteTxnMarkers: {response}")
        self.settle(lambda: log.log_end_offset > end and log.high_watermark >= log.log_end_offset,
                    "the marker replicated")

    def settle(self, predicate: Callable[[], bool], what: str) -> None:
        for _ in range(self.max_steps):
            if predicate():
                return
            self.endpoint.step()
        raise TimeoutError(f"sim: {what} not reached in {self.max_steps} steps")


class ReplayTxnProducer(TxnProducer):
    """The simulator's side of script 5: the batches the real producer wrote on Kafka, byte for byte, as
    transactional acks=all produces to the current leader, and the coordinator's markers as it wrote
    them (producer id and epoch, coordinator epoch). So both clusters get the same input; what each
    leader makes of it (offsets, epochs, LSO, HW, the aborted-transaction index) is compared."""

    TXN_ID = "epochguard-replay"

    def __init__(self, b: SimBackend, source: list[tuple[Any, ...]]) -> None:
        self.b, self.source = b, source

    def begin(self) -> None:
        pass

    def send(self, tag: str, n: int, ts: int) -> None:
        covered = 0
        while covered < n:
            item = self.source.pop(0)
            kind, data, count = item[0], item[1], item[-1]
            assert kind == "data", f"replay: expected {tag}'s records, Kafka's log has a marker next"
            r = self.b.send(self.b.state().leader, produce(self.b.topic, 0, data, -1, self.TXN_ID))
            code = r.responses[0].partition_responses[0].error_code
            if code:
                raise RuntimeError(f"sim transactional produce of {tag}: error {code}")
            covered += count
        assert covered == n, f"replay: {tag}'s batches hold {covered} records, not {n}"

    def end(self, commit: bool) -> None:
        kind, what, *_ = self.source.pop(0)
        assert kind == "marker" and what[2] == commit, f"replay: Kafka's log has {kind} next, not this marker"
        pid, epoch, _, coordinator_epoch = what
        self.b.write_marker(pid, epoch, commit, coordinator_epoch)


def wait_real(predicate: Callable[[], bool], what: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        time.sleep(0.1)


__all__ = ["Backend", "Observer", "KafkaBackend", "SimBackend", "Replica", "TxnReplica", "TxnProducer",
           "KafkaTxnProducer", "ReplayTxnProducer", "read_txn_index", "produce", "fetch", "list_offsets",
           "offset_for_leader_epoch", "metadata", "records", "EARLIEST", "LATEST", "Path"]
