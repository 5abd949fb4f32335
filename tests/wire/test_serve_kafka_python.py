"""kafka-python against `epochguard serve`: the real wire, a real client, the server as a subprocess."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.wire.serving import Served

kafka = pytest.importorskip("kafka", reason="kafka-python (the dev extra) is needed for the real-client tests")


def _consume(bootstrap: str, topic: str, seconds: float, client_id: str, stop_after: int | None = None) -> list[tuple[int, bytes, int]]:
    consumer = kafka.KafkaConsumer(bootstrap_servers=bootstrap, client_id=client_id, enable_auto_commit=False,
                                   auto_offset_reset="earliest")
    tp = kafka.TopicPartition(topic, 0)
    consumer.assign([tp])
    consumer.seek_to_beginning(tp)
    log: list[tuple[int, bytes, int]] = []
    end = time.monotonic() + seconds
    while time.monotonic() < end and (stop_after is None or len(log) < stop_after):
        for r in consumer.poll(timeout_ms=200).get(tp, []):
            log.append((r.offset, r.value, r.leader_epoch))
    consumer.close()
    return log


def test_clean_acks_all_produce_and_assign_consume_lose_and_duplicate_nothing(tmp_path: Path) -> None:
    from epochguard.wire.replay import replay

    trace = tmp_path / "clean.jsonl"
    served = Served("clean", trace=trace)
    try:
        producer = kafka.KafkaProducer(bootstrap_servers=served.bootstrap, acks="all", client_id="kp-producer")
        values = [b"value-%d" % i for i in range(300)]
        futures = [producer.send("input", key=b"k", value=v) for v in values]
        producer.flush(timeout=30)
        acked = [f.get(timeout=10).offset for f in futures]
        producer.close()
        log = _consume(served.bootstrap, "input", 20, "kp-consumer", stop_after=len(values))
    finally:
        result = served.stop()
    assert acked == list(range(len(values)))  # acks=all: every record acknowledged, in order
    assert [(o, v) for o, v, _ in log] == list(enumerate(values))  # read back once each, in order
    assert {e for _, _, e in log} == {0}  # with the leader epoch that wrote them
    clients = {c["client_id"]: c for c in result["clients"]}
    assert clients["kp-producer"]["software"].startswith("kafka-python")  # ApiVersions v3 software name
    assert clients["kp-consumer"]["divergences"] == [] and clients["kp-producer"]["acks_lost"] == []
    assert result["faults"] == [] and result["violations"] == []
    # The trace replays against a fresh cluster with byte-identical answers, and re-judges the same.
    assert replay(trace).report() == result["clients"]


@pytest.mark.parametrize("trigger", ["served", "caught-up"])
def test_unclean_election_verdict_agrees_with_the_consumers_own_log(trigger: str, tmp_path: Path) -> None:
    from epochguard.wire.replay import replay

    trace = tmp_path / "run.jsonl"
    served = Served("unclean-election", "--trigger", trigger, "--timeout-s", "10", trace=trace)
    try:
        log = _consume(served.bootstrap, "events", 9, f"kp-{trigger}")
    finally:
        result = served.stop()
    assert result["trigger_outcome"] == "met"
    assert any(not e["clean"] for e in result["elections"])
    # Ground truth from the delivery log alone: records of the old epoch (0) at or past the divergence
    # point that the consumer delivered and never delivered again are phantoms it kept (silent);
    # otherwise it went back for the replacements (detected or reset).
    (client,) = [c for c in result["clients"] if c["client_id"] == f"kp-{trigger}"]
    (event,) = client["divergences"]
    seen: dict[int, int] = {}
    for offset, _value, _epoch in log:
        seen[offset] = seen.get(offset, 0) + 1
    phantoms = [o for o, _v, e in log if o >= event["offset"] and e == 0 and seen[o] == 1]
    if phantoms:
        assert event["verdict"] == "silent", (event, phantoms[:5])
    else:
        assert event["verdict"] in ("detected", "reset"), event
        reread = [o for o, n in seen.items() if n > 1]
        if event["verdict"] == "detected" and reread:  # it went back exactly to where the logs part
            assert min(reread) == event["offset"], event
    # Offline: the trace replays with byte-identical answers (faults at their recorded steps) and
    # `epochguard judge` reaches the same verdicts.
    assert replay(trace).report() == result["clients"]
