"""`epochguard compat --cluster kafka`: the same real clients, judged by the same delivery-log truth, against
Apache Kafka itself (a KRaft cluster from Maven jars, `epochguard.kafka.KafkaCluster`) instead of `serve`.

A run here is what one `epochguard serve SCENARIO --trigger T` run is, with the faults fired from this
side (stop, start, pause a broker; ElectLeaders) and the trigger read from the drivers' own delivery
logs, since no server sees what they fetched: `served` once every driver has consumed the trigger
partition up to what the scenario's producer had acknowledged, `caught-up` the same with the producer
paused and one long poll (1 s) more. So a driver that starts late (a JVM under load) is waited for,
never judged stuck before the fault. The producer writing `events` is confluent-kafka (serve's simulated
producer's role), with the scenario's acks. Every run has its own topics (`events-N`, `input-N`), so one
cluster serves the whole matrix, and all the clients share a run.

The scenarios a real cluster reproduces (serve's description of each, and how it is done here):
- `unclean-election`: `events` on brokers [1, 2]; follower 2 stops (controlled shutdown: ISR [1]); acks=1
  records only broker 1 has are read; 1 stops, the producer resumes (its records wait for a leader, as
  serve's), 2 starts, ElectLeaders UNCLEAN elects 2; 1 starts and truncates. Broker 3 stays up (as
  serve, which cuts broker 1 off but never has every broker down).
- `unclean-empty-leader`: as above, but 2 stops before the first record: the new leader is empty.
- `consecutive-unclean`: `events` on [1, 2, 3]; 2 stops (ISR [1, 3]), 2 s of acks=1 records later 3 stops
  (ISR [1]) and 0.5 s later the producer pauses (the trigger); 1 stops, 2 starts and ElectLeaders UNCLEAN
  elects it; 0.5 s of its records (the second trigger: every driver has read them); 2 stops, 3 starts and is
  elected uncleanly: it never had 2's epoch, so OffsetsForLeaderEpoch of it answers the end of 3's earlier
  epoch, above the clients' positions (Kafka's `LeaderEpochFileCache.endOffsetFor`), as on serve.
- `leader-bounce`: acks=all; leader 1 stops (clean election), starts; the next leader stops, starts; a
  preferred election gives leadership back to 1.
- `lagging-leader`: acks=all; broker 2 made preferred (replicas reordered), 3 paused (SIGSTOP: in the ISR,
  not fetching), so the HW stops while 2 keeps fetching; a preferred election makes 2 the leader with its
  HW below its epoch's start (KIP-207) until 3 resumes 3 s later. serve crashes leader 1 instead; on
  Kafka a controlled shutdown waits for every unfenced broker's metadata, the paused one's too, so the
  leader moves by election.
ELR (KIP-966) is off in the cluster this starts, as in Kafka's UncleanLeaderElectionTest.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from epochguard.kafka import KafkaCluster, PartitionState
from epochguard.wire.drivers.registry import Client
from epochguard.wire.drivers.session import RunError, RunResult, _stop_all, _wait_started, allows_unclean
from epochguard.wire.drivers.truth import judge_client, read_epochs, read_final_log

__all__ = ["KAFKA_SCENARIOS", "EventsProducer", "KafkaRun", "run_kafka", "run_kafka_matrix"]

KAFKA_SCENARIOS = ("unclean-election", "unclean-empty-leader", "consecutive-unclean", "leader-bounce", "lagging-leader")
_ACKS = {"unclean-election": "1", "unclean-empty-leader": "1", "consecutive-unclean": "1", "leader-bounce": "all",
         "lagging-leader": "all"}
_LONG_POLL_S = 1.0  # caught-up: one empty long poll (500 ms for most clients) after being served the end


class EventsProducer:
    """Writes `batch` records to `topic` partition 0 every `interval_ms` (confluent-kafka, the given acks),
    pausable; keeps the last acknowledged offset. As serve's simulated producer (5 records every 50 ms):
    one batch in flight (the next one once it is acknowledged, at most one every `interval_ms`), retried
    every 100 ms meanwhile. So a partition without a leader for 30-45 s (Kafka's unclean election here: a broker's
    stop and another's start) gets no backlog of thousands of records, only the one batch that waited,
    appended as soon as the new leader is there (librdkafka's reconnect back-off, up to 10 s by default
    towards a broker that was down, would delay it by seconds and lose the race to the consumers)."""

    def __init__(self, bootstrap: str, topic: str, acks: str, interval_ms: float = 50.0, batch: int = 5,
                 paused: bool = False) -> None:
        import confluent_kafka as ck

        self.topic, self.interval_s, self.batch = topic, interval_ms / 1000, batch
        # message.timeout.ms: a batch sent before an unclean election waits for it
        self._producer = ck.Producer({
            "bootstrap.servers": bootstrap, "acks": acks, "linger.ms": 0, "enable.idempotence": False,
            "client.id": "epochguard-events-producer", "message.timeout.ms": 300000, "log_level": 3,
            "retry.backoff.ms": 100, "retry.backoff.max.ms": 100, "reconnect.backoff.ms": 50,
            "reconnect.backoff.max.ms": 100, "topic.metadata.refresh.fast.interval.ms": 100})
        self.acked = -1
        self._seq = 0
        self._outstanding = 0  # records of the batch in flight
        self._paused = threading.Event()
        if paused:
            self._paused.set()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="events-producer", daemon=True)
        self._thread.start()

    def _delivered(self, err: Any, msg: Any) -> None:
        with self._lock:
            self._outstanding -= 1
            if err is None and msg.offset() is not None:
                # the latest, not the highest: after an unclean election the log end can be lower
                self.acked = msg.offset()

    def _run(self) -> None:
        while not self._stop.is_set():
            if not self._paused.is_set() and self._outstanding == 0:
                with self._lock:
                    self._outstanding = self.batch
                for _ in range(self.batch):
                    self._seq += 1
                    self._producer.produce(self.topic, value=f"events-{self._seq:08d}".encode(), partition=0,
                                           on_delivery=self._delivered)
                time.sleep(self.interval_s)
            self._producer.poll(0.01)  # delivery callbacks

    def pause(self, timeout_s: float = 60.0) -> int:
        """Stop writing; returns the log end once what was sent is acknowledged (or timed out)."""
        self._paused.set()
        time.sleep(self.interval_s * 2)  # the loop's last produce()
        self._producer.flush(timeout_s)
        return self.acked + 1

    def resume(self) -> None:
        self._paused.clear()

    @property
    def paused(self) -> bool:
        return self._paused.is_set()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self._producer.flush(10)


def consumed_to(log: Path, topic: str, end: int, since: float = 0.0) -> bool:
    """Whether the delivery log holds a record of `topic`-0 at offset `end - 1` or beyond, consumed at `since`
    or later (a second trigger: what a client read before the first faults is no longer the log)."""
    try:
        with open(log, encoding="utf-8") as f:
            for line in f:
                if line.endswith("\n") and '"consumed"' in line:
                    e = json.loads(line)
                    if (e.get("topic") == topic and e.get("partition") == 0 and e.get("offset", -1) >= end - 1
                            and e["t"] >= since):
                        return True
    except FileNotFoundError:
        pass
    return False


@dataclass
class KafkaRun:
    """One scenario run's handles: what a scenario script drives."""

    cluster: KafkaCluster
    producer: EventsProducer
    events: str
    input: str
    trigger: str
    logs: dict[str, Path]
    trigger_timeout_s: float = 120.0
    progress: TextIO | None = None
    fault_at: float | None = None  # wall-clock time the (last) trigger was met and the faults began
    served_at: list[float] = field(default_factory=list)  # each time the partition had a leader again after them

    def leader_back(self) -> None:
        self.served_at.append(time.time())

    def note(self, what: str) -> None:
        if self.progress is not None:
            print(f"compat kafka: {what}", file=self.progress, flush=True)

    def wait_trigger(self) -> None:
        """`served`: every driver consumed `events` up to what was acknowledged when this began;
        `caught-up`: with the producer paused, and one long poll more. Times out like serve's trigger
        (the faults fire anyway) after `trigger_timeout_s`."""
        was_paused = self.producer.paused
        paused = self.trigger == "caught-up" or was_paused
        end = self.producer.pause() if paused else self.producer.acked + 1
        deadline = time.monotonic() + self.trigger_timeout_s
        since = self.fault_at or 0.0
        while not all(consumed_to(log, self.events, end, since) for log in self.logs.values()):
            if time.monotonic() > deadline:
                self.note(f"trigger {self.trigger} timed out at offset {end}")
                break
            time.sleep(0.1)
        if self.trigger == "caught-up":
            time.sleep(_LONG_POLL_S)
        self.fault_at = time.time()
        if not was_paused:
            self.producer.resume()
        self.note(f"trigger {self.trigger} at offset {end}")

    def partition(self, topic: str) -> PartitionState | None:
        return self.cluster.partition(topic, 0)

    def wait(self, topic: str, predicate: Callable[[PartitionState], bool], what: str) -> PartitionState:
        return self.cluster.wait_partition(topic, 0, predicate, what, timeout_s=120.0)


def _unclean(run: KafkaRun, empty: bool) -> None:
    c = run.cluster
    if not empty:
        time.sleep(1.0)  # records both replicas have (serve: 50 steps before broker 1 is cut off)
        run.producer.pause()
    c.stop_broker(2)
    run.wait(run.events, lambda s: s.isr == (1,), "ISR [1]")
    # acks=1 records only broker 1 has, about as many as serve's (700 ms of its producer): a client that
    # never validates waits on the new leader until its log passes the client's position again
    run.producer.resume()
    time.sleep(0.5)
    run.producer.pause()
    run.wait_trigger()
    c.stop_broker(1)
    # serve's order: the producer resumes 30 ms after the crash, before the election, so its records wait
    # for the new leader and are its first appends, at the offsets the old ones had. Resumed only after
    # the election, the refill raced the clients' first fetch from the new leader (librdkafka, sarama and
    # kafka-go met OFFSET_OUT_OF_RANGE at their position and reset or waited: docs/real-kafka.md)
    run.producer.resume()
    c.start_broker(2)
    c.elect_leaders(run.events, 0, unclean=True)
    run.wait(run.events, lambda s: s.leader == 2, "leader 2 (unclean)")
    elected = time.time()
    run.leader_back()
    run.note(f"leader 2 elected uncleanly at {elected:.2f}, {elected - (run.fault_at or elected):.1f} s after the "
             "trigger")
    # serve restarts broker 1 300 steps (3 s) after the crash: the new leader takes its first records
    # first, not while a JVM starts on the same cores (seen: 0.5 s per acks=1 round trip meanwhile)
    time.sleep(3.0)
    c.start_broker(1)
    run.wait(run.events, lambda s: set(s.isr) == {1, 2}, "ISR [1, 2] again")


def _consecutive_unclean(run: KafkaRun) -> None:
    c = run.cluster
    time.sleep(1.0)  # records every replica has
    c.stop_broker(2)
    run.wait(run.events, lambda s: s.isr == (1, 3), "ISR [1, 3]")
    time.sleep(2.0)  # records 1 and 3 have, 2 not: 3's epoch 0 reaches past anything 2 will write
    c.stop_broker(3)
    run.wait(run.events, lambda s: s.isr == (1,), "ISR [1]")
    time.sleep(0.5)
    run.producer.pause()
    run.wait_trigger()
    c.stop_broker(1)
    run.producer.resume()  # as in `_unclean`: its records wait for the new leader
    c.start_broker(2)
    c.elect_leaders(run.events, 0, unclean=True)
    run.wait(run.events, lambda s: s.leader == 2, "leader 2 (unclean)")
    run.leader_back()
    time.sleep(0.5)  # a few of 2's own records, in its new epoch
    run.producer.pause()
    run.wait_trigger()  # every driver has read them
    c.stop_broker(2)
    run.producer.resume()
    c.start_broker(3)
    c.elect_leaders(run.events, 0, unclean=True)
    run.wait(run.events, lambda s: s.leader == 3, "leader 3 (unclean)")
    run.leader_back()
    run.note(f"leader 3 elected uncleanly, {time.time() - (run.fault_at or time.time()):.1f} s after the trigger")
    time.sleep(3.0)
    c.start_broker(1)
    c.start_broker(2)
    run.wait(run.events, lambda s: set(s.isr) == {1, 2, 3}, "ISR [1, 2, 3] again")


def _leader_bounce(run: KafkaRun) -> None:
    c = run.cluster
    run.wait_trigger()
    for b in (1, 2):
        c.stop_broker(b)

        def moved(s: PartitionState, gone: int = b) -> bool:
            return s.leader not in (-1, gone)
        run.wait(run.events, moved, f"a leader other than {b}")
        c.start_broker(b)
        run.wait(run.events, lambda s: set(s.isr) == {1, 2, 3}, "ISR [1, 2, 3] again")
    c.elect_leaders(run.events, 0, unclean=False)
    run.wait(run.events, lambda s: s.leader == 1, "leader 1 again (preferred)")


def _lagging_leader(run: KafkaRun) -> None:
    c = run.cluster
    c.reorder_replicas(run.events, 0, [2, 1, 3])
    run.wait_trigger()
    c.pause_broker(3)
    try:
        time.sleep(1.0)  # broker 2 fetches what the HW, held by 3, does not cover
        # the admin may pick the paused broker: Kafka's own ElectLeaders through a running one instead
        _elect_preferred_direct(c, run.events)
        time.sleep(3.0)
    finally:
        c.resume_broker(3)
    run.wait(run.events, lambda s: s.leader == 2 and set(s.isr) == {1, 2, 3}, "leader 2, ISR [1, 2, 3]")


def _elect_preferred_direct(cluster: KafkaCluster, topic: str) -> None:
    """ElectLeaders PREFERRED through broker 1 (forwarded to the controller), never the paused broker 3."""
    import socket
    import struct

    from kafka.protocol.admin import ElectLeadersRequest, ElectLeadersResponse

    r = ElectLeadersRequest[2]
    req = r(election_type=0, timeout_ms=30000, topic_partitions=[r.TopicPartitions(topic=topic, partitions=[0])])
    req.with_header(correlation_id=1, client_id="epochguard-compat-kafka")
    frame = bytes(req.encode(header=True))
    with socket.create_connection(cluster.address(1), timeout=60) as sock:
        sock.sendall(struct.pack(">i", len(frame)) + frame)
        size = struct.unpack(">i", _recv(sock, 4))[0]
        resp = ElectLeadersResponse.decode(_recv(sock, size), version=2, header=True)
    codes = {p.error_code for t in resp.replica_election_results for p in t.partition_result}
    if resp.error_code or codes - {0, 84}:  # 84: ELECTION_NOT_NEEDED
        raise RuntimeError(f"ElectLeaders PREFERRED {topic}-0: {resp}")


def _recv(sock: Any, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("connection closed")
        buf += chunk
    return bytes(buf)


_SCRIPTS: dict[str, Callable[[KafkaRun], None]] = {
    "unclean-election": lambda run: _unclean(run, empty=False),
    "unclean-empty-leader": lambda run: _unclean(run, empty=True),
    "consecutive-unclean": _consecutive_unclean,
    "leader-bounce": _leader_bounce,
    "lagging-leader": _lagging_leader,
}


def run_kafka(
    cluster: KafkaCluster, scenario: str, trigger: str, clients: Sequence[Client], workdir: Path, run_tag: str, *,
    after_settle_s: float = 8.0, start_timeout_s: float = 120.0, stuck_after_s: float = 5.0,
    progress: TextIO | None = None,
) -> RunResult:
    """One scenario x trigger on the real cluster with every client in `clients`, judged by their
    delivery logs against the final log read back once the cluster has healed."""
    if scenario not in _SCRIPTS:
        raise ValueError(f"scenario {scenario!r} has no Kafka script; choose from {', '.join(KAFKA_SCENARIOS)}")
    workdir.mkdir(parents=True, exist_ok=True)
    events, inputs = f"events-{run_tag}", f"input-{run_tag}"
    configs = {"min.insync.replicas": "1", "retention.ms": "-1"}
    # the unclean scenarios' `events` lives on brokers 1 and 2 only: broker 3 stays up throughout, so
    # clients always reach a broker (serve's cluster never has every broker down either); the drivers'
    # `input` is led by broker 3 and never loses its leader
    cluster.create_topic(events, {0: [1, 2] if scenario.startswith("unclean") else [1, 2, 3]}, configs)
    cluster.create_topic(inputs, {0: [3, 1, 2]}, configs)
    # unclean-empty-leader: nothing is written before the followers have stopped
    producer = EventsProducer(cluster.bootstrap, events, _ACKS[scenario], paused=scenario == "unclean-empty-leader")
    logs = {c.name: workdir / f"{c.name}.jsonl" for c in clients}
    drivers: dict[str, Any] = {}
    run = KafkaRun(cluster, producer, events, inputs, trigger, logs, progress=progress)
    try:
        for c in clients:
            drivers[c.name] = c.start(cluster.bootstrap, logs[c.name], "--consume-topic", events,
                                      "--produce-topic", inputs)
        _wait_started(drivers, logs, start_timeout_s)
        _SCRIPTS[scenario](run)
        run.note(f"{scenario} --trigger {trigger}: settled")
        time.sleep(after_settle_s)
        _stop_all(drivers)
        producer.close()
        final = read_final_log(cluster.bootstrap, topics=(events, inputs), timeout_s=60.0)
    except (TimeoutError, RuntimeError) as exc:
        raise RunError(f"kafka {scenario} --trigger {trigger}: {exc}") from exc
    finally:
        _stop_all(drivers)
        producer.close()
        for b in cluster.broker_ids:  # the next run needs every broker, whatever broke this one
            if not cluster.running(b):
                cluster.start_broker(b)
            else:
                cluster.resume_broker(b)
    # Stuck counts from when the partition could serve again (serve: from when its faults started, which
    # elect the new leader 20 ms after the old one dies); Kafka elects after a broker's stop and another's
    # start (10-45 s of JVMs), which no client can shorten: every client read nothing meanwhile.
    epochs = read_epochs(logs.values())
    truths = {name: judge_client(path, final, consume_topic=events, stuck_after_s=stuck_after_s,
                                 faults_t=run.served_at or ([run.fault_at] if run.fault_at else None),
                                 unclean=allows_unclean(scenario),
                                 epochs=epochs)
              for name, path in logs.items()}
    return RunResult(cluster.bootstrap, logs, final, truths, None)


def run_kafka_matrix(
    runs: Sequence[tuple[str, str]], clients: Sequence[Client], workdir: Path, *, progress: TextIO | None = None,
) -> dict[tuple[str, str], RunResult | str]:
    """Every (scenario, trigger) on one real cluster started here (ELR off) and stopped at the end."""
    results: dict[tuple[str, str], RunResult | str] = {}
    with KafkaCluster(workdir / "cluster", brokers=3, elr=False) as cluster:
        for n, (scenario, trigger) in enumerate(runs):
            if progress is not None:
                print(f"compat kafka: {scenario} --trigger {trigger} ...", file=progress, flush=True)
            try:
                results[(scenario, trigger)] = run_kafka(cluster, scenario, trigger, clients,
                                                         workdir / f"{scenario}-{trigger}", str(n), progress=progress)
            except (RunError, OSError) as exc:
                results[(scenario, trigger)] = f"run failed: {exc}"
    return results
