"""`idempotent-truncation` (issue 20; librdkafka#4953, #3584, aiokafka#1017): an idempotent producer's
acknowledged tail is lost in an unclean election, and the new leader knows the producer's sequences only
as far as it had copied them, so it answers the next batch OUT_OF_ORDER_SEQUENCE_NUMBER (as Kafka's
`ProducerAppendInfo.checkSequence` does). The acknowledged records are gone by the election's doing; what
the producer does next is its own: bump its epoch and go on (`clean`), write records again that the log
already holds (`duplicate`), or stop producing (`fatal`). The server's judge names the outcome from the
exchanges and the leader's log, the delivery-log truth from what the client was acknowledged; they must
agree, and each client must do what its code says.

At the message level first (a scripted producer), then with the real clients that can produce
idempotently, in one run: the Java client and franz-go are idempotent by default, librdkafka and
epochguard's own producer are asked to be (`--option producer.…`).
"""

from __future__ import annotations

import pytest

from epochguard._core import encode_batch
from epochguard.errors import Errors
from epochguard.protocol.messages import ProducePartition, ProduceRequest, ProduceResponse
from epochguard.types import TopicPartition
from epochguard.wire import codec
from epochguard.wire.drivers.compat import run_groups
from epochguard.wire.drivers.registry import client
from epochguard.wire.drivers.session import RunResult
from epochguard.wire.engine import WireCluster
from epochguard.wire.judge import STUCK_AFTER_STEPS, Judge
from epochguard.wire.scenarios import build
from tests.wire.conftest import require, require_final_reader
from tests.wire.serving import ServeRuns

ADDRESSES = {1: ("127.0.0.1", 9001), 2: ("127.0.0.1", 9002), 3: ("127.0.0.1", 9003)}
INPUT = TopicPartition("input", 0)
PID = 7

# What each client's producer does after OUT_OF_ORDER_SEQUENCE_NUMBER, read from its code:
# - kafka-clients 4.4.0: `TransactionManager` bumps an idempotent producer's epoch (KIP-360) and resends
#   from sequence 0: clean.
# - franz-go v1.22: resets the producer id/epoch for the partition and goes on: clean.
# - librdkafka 2.16 (enable.idempotence=true): "sequence desynchronization" is a fatal error; the
#   producer raises _FATAL on every call after it.
# - kafka-python 3.0.12 (enable_idempotence=True): `Sender._dispatch_error` classifies it through its
#   port of Java's TransactionManager as needing an epoch bump (KIP-360) and goes on: clean.
# - aiokafka 0.14 (enable_idempotence=True): `SendProduceReqHandler.handle_response` fails the batch (the error is
#   not retriable) and keeps the producer id, epoch and next sequence, so every later batch is refused
#   OUT_OF_ORDER_SEQUENCE_NUMBER too: nothing is acknowledged again until a restart (aiokafka#1017): fatal.
# - sarama v1.61.1 (Producer.Idempotent): `asyncProducer.returnErrors` fails the batch to the application
#   and, as it carried sequences, bumps the producer epoch itself ("rolling over epoch"): clean. Not in
#   this test: when its retries (3, 100 ms apart) run out against the dead broker 1 before the metadata
#   names broker 2, it bumps its epoch then, and broker 2 takes its next batch at sequence 0 without an
#   OUT_OF_ORDER_SEQUENCE_NUMBER first (two runs of three here; `compat` shows it as `-` then).
# - epochguard: as Java's TransactionManager (client/producer.py): clean.
# (How each is asked to be idempotent is the registry's: `Client.idempotent`.)
IDEMPOTENT: dict[str, str] = {"confluent-kafka": "fatal", "kafka-python": "clean", "aiokafka": "fatal",
                              "java-classic": "clean", "franz-go": "clean", "epochguard": "clean"}


# --- the judge at the message level ------------------------------------------------------------------
def _produce(w: WireCluster, conn, seq: int, values: list[bytes], epoch: int = 0) -> int:
    records = encode_batch([(None, v) for v in values], producer_id=PID, producer_epoch=epoch, base_sequence=seq)
    w.submit(conn, codec.RequestHeader(0, 9, 1, "scripted"),
             ProduceRequest((ProducePartition(INPUT.topic, INPUT.partition, records),), acks=-1))
    for _ in range(300):
        answers = [r for c, _, r in w.drain() if c is conn]
        if answers:
            (response,) = answers
            assert isinstance(response, ProduceResponse)
            return int(response.partitions[0].error_code)
        w.step()
    raise AssertionError("no answer")


@pytest.fixture
def answered_out_of_order() -> tuple[WireCluster, Judge, object]:
    """A scripted idempotent producer wrote sequences 0-1 and was then answered OUT_OF_ORDER for 5."""
    w = WireCluster(build("idempotent-truncation"), 0, ADDRESSES)
    judge = Judge()
    w.observers.append(judge)
    for _ in range(3000):
        if w.ready() and w.cluster.acting_leader(INPUT) is not None:
            break
        w.step()
    conn = w.connect(w.cluster.acting_leader(INPUT))
    assert _produce(w, conn, 0, [b"a", b"b"]) == Errors.NONE
    assert _produce(w, conn, 5, [b"c"]) == Errors.OUT_OF_ORDER_SEQUENCE_NUMBER
    return w, judge, conn


def _outcomes(judge: Judge) -> list[tuple[str, str]]:
    judge.finish()
    (report,) = [c for c in judge.report() if c["client_id"] == "scripted"]
    return [(e["error"], e["outcome"]) for e in report["sequence_errors"]]


def test_a_producer_acknowledged_again_after_the_error_is_clean(answered_out_of_order) -> None:
    w, judge, conn = answered_out_of_order
    assert _produce(w, conn, 0, [b"c"], epoch=1) == Errors.NONE  # its epoch bumped, from sequence 0
    assert _outcomes(judge) == [("OUT_OF_ORDER_SEQUENCE_NUMBER", "clean")]


def test_a_producer_never_acknowledged_after_the_error_is_fatal(answered_out_of_order) -> None:
    w, judge, conn = answered_out_of_order
    assert _produce(w, conn, 7, [b"c"]) == Errors.OUT_OF_ORDER_SEQUENCE_NUMBER  # it kept trying, refused
    assert _outcomes(judge) == [("OUT_OF_ORDER_SEQUENCE_NUMBER", "fatal")] * 2


def test_a_producer_refused_for_the_stuck_bound_is_producer_stuck(answered_out_of_order) -> None:
    """aiokafka#1017's shape: refused OUT_OF_ORDER_SEQUENCE_NUMBER from then on; the anomaly once its last
    acknowledgement is STUCK_AFTER_STEPS behind its last request, not before."""
    w, judge, conn = answered_out_of_order
    for _ in range(STUCK_AFTER_STEPS - 50):
        w.step()
    assert _produce(w, conn, 7, [b"c"]) == Errors.OUT_OF_ORDER_SEQUENCE_NUMBER
    judge.finish()
    (report,) = [c for c in judge.report() if c["client_id"] == "scripted"]
    assert [a["anomaly"] for a in report["anomalies"]] == []
    for _ in range(100):
        w.step()
    assert _produce(w, conn, 7, [b"c"]) == Errors.OUT_OF_ORDER_SEQUENCE_NUMBER
    judge.finish()
    (report,) = [c for c in judge.report() if c["client_id"] == "scripted"]
    assert [(a["anomaly"], a["partition"], a["offset"]) for a in report["anomalies"]] == [
        ("producer-stuck", INPUT.partition, 1)]  # its last acknowledged record: b, at 1


def test_a_producer_that_writes_acknowledged_records_again_duplicates(answered_out_of_order) -> None:
    w, judge, conn = answered_out_of_order
    assert _produce(w, conn, 0, [b"b", b"c"], epoch=1) == Errors.NONE  # b was written already
    assert _outcomes(judge) == [("OUT_OF_ORDER_SEQUENCE_NUMBER", "duplicate")]


def test_an_acknowledgement_on_another_partition_or_by_another_client_is_no_recovery(answered_out_of_order) -> None:
    w, judge, _conn = answered_out_of_order
    other = w.connect(w.cluster.acting_leader(INPUT))
    records = encode_batch([(None, b"x")], producer_id=PID + 1, producer_epoch=0, base_sequence=0)
    w.submit(other, codec.RequestHeader(0, 9, 1, "someone-else"),
             ProduceRequest((ProducePartition(INPUT.topic, INPUT.partition, records),), acks=-1))
    for _ in range(100):
        w.step()
        w.drain()
    assert _outcomes(judge) == [("OUT_OF_ORDER_SEQUENCE_NUMBER", "fatal")]


# --- real clients ----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> ServeRuns:
    require_final_reader()
    return ServeRuns(tmp_path_factory.mktemp("idempotent"))


def _run_of(runs: ServeRuns, name: str) -> RunResult:
    """The run `name` took part in: one per group of clients that start alike (Python, JVM, Go), as
    `epochguard compat` runs them, so that no producer idles while two JVMs start and no run carries
    seven clients on two cores."""
    require(client(name))
    group = next(g for g in run_groups([client(n) for n in IDEMPOTENT]) if client(name) in g)
    return runs.run("idempotent-truncation", "ack", group[0].toolchain or "python", group,
                    driver_args={c.name: c.idempotent or () for c in group})


@pytest.mark.parametrize("name", list(IDEMPOTENT))
def test_each_producer_does_what_its_code_says_and_both_sides_agree(runs: ServeRuns, name: str) -> None:
    run = _run_of(runs, name)
    server = run.server_client(f"epochguard-{name}")
    assert server is not None, f"the server never saw {name}"
    truth = run.truths[name]
    errors = server["sequence_errors"]
    assert errors, f"{name} was never answered OUT_OF_ORDER_SEQUENCE_NUMBER\n{run.why(name)}"
    assert {e["error"] for e in errors} == {"OUT_OF_ORDER_SEQUENCE_NUMBER"}
    assert {e["outcome"] for e in errors} == {truth.producer_outcome}, f"server {errors}, log {run.logs[name]}"
    assert truth.producer_outcome == IDEMPOTENT[name], f"{name}: {truth.producer_outcome}; log {run.logs[name]}"
    # The tail broker 1 alone acknowledged is gone with the election: lost, and blamed on no client.
    assert truth.lost_acked and server["acks_lost"] == []
    # Both histories name the same anomalies of its producer: a fatal one is producer-stuck on both sides.
    said = {a["anomaly"] for a in server["anomalies"] if a["topic"] == "input"}
    logged = {a.name for a in truth.anomalies if a.topic == "input"}
    assert said == logged, f"{name}: server {said}, log {logged}\n{run.why(name)}"


def test_librdkafka_says_why_it_stopped(runs: ServeRuns) -> None:
    run = _run_of(runs, "confluent-kafka")
    from epochguard.wire.drivers.delivery_log import read_log

    texts = [str(e.get("text")) for e in read_log(run.logs["confluent-kafka"]) if e["kind"] == "error"]
    # Raised by produce() or poll(), named by its code (OUT_OF_ORDER_SEQUENCE_NUMBER) or as _FATAL
    assert any("(fatal)" in t and "sequence desynchronization" in t for t in texts), texts
