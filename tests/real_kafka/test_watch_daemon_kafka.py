"""`epochguard watch` as a daemon (not `--once`: the command itself, a child process) on the session's Kafka 4.4,
through the wire proxy, which spoils brokers' answers as failing brokers would (`KafkaWireProxy.sabotage`):
answers of garbage (arrays claiming 2^31 elements), answers after the request time-out, and connections
closed mid-request, to ListOffsets, Metadata and the validation's OffsetsForLeaderEpoch; and the leader down
for 2 s (`KafkaWireProxy.down`: its connections refused). Each costs the round it falls in, never the
watcher: it keeps running, its state file follows the cluster round after round, a clean leader change met
with a spoiled validation is validated at the next round without an event, and a daemon restarted after a
leader change while it was down validates the positions it kept.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from epochguard.kafka import KafkaCluster

from .test_watch_kafka import produce
from .wire_proxy import KafkaWireProxy

pytestmark = [pytest.mark.kafka, pytest.mark.no_mutants]

LIST_OFFSETS, METADATA, OFFSETS_FOR_LEADER_EPOCH = 2, 3, 23
TIMEOUT_MS = 1000  # the daemon's request time-out; a late answer comes 2.5 s after the request


class Daemon:
    """`epochguard watch` without --once: 300 ms rounds, a state file and an event log."""

    def __init__(self, bootstrap: str, topic: str, state: Path, events: Path) -> None:
        self.state, self.events = state, events
        self.stderr = open(state.with_suffix(".stderr"), "ab")  # closed in stop()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "epochguard", "watch", "-b", bootstrap, "--topic", topic, "--interval", "0.3",
             "--request-timeout-ms", str(TIMEOUT_MS), "--state", str(state), "--events", str(events)],
            stdout=subprocess.DEVNULL, stderr=self.stderr)

    def position(self) -> list | None:
        try:
            rows = json.loads(self.state.read_text())["partitions"]
        except (FileNotFoundError, ValueError):  # not written yet (the file is replaced atomically)
            return None
        return rows[0] if rows else None

    def wait(self, predicate: Callable[[list], bool], what: str, timeout_s: float = 60.0) -> list:
        deadline = time.monotonic() + timeout_s
        while True:
            assert self.proc.poll() is None, f"the daemon exited ({self.proc.returncode}): {self.errors()}"
            row = self.position()
            if row is not None and predicate(row):
                return row
            assert time.monotonic() < deadline, f"timed out waiting for {what}; position {row}; {self.errors()}"
            time.sleep(0.1)

    def errors(self) -> str:
        return self.state.with_suffix(".stderr").read_text(errors="replace")[-3000:]

    def logged(self) -> list[dict]:
        return [json.loads(line) for line in self.events.read_text().splitlines()] if self.events.exists() else []

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.stderr.close()
        return self.proc.returncode


def test_failing_brokers_cost_a_round_never_the_daemon_whose_state_follows_and_survives_a_restart(
    kafka_cluster: KafkaCluster, kafka_proxy: KafkaWireProxy, tmp_path: Path,
) -> None:
    c, proxy, topic = kafka_cluster, kafka_proxy, "watch-daemon"
    state, events = tmp_path / "state.json", tmp_path / "events.jsonl"
    c.create_topic(topic, {0: [1, 2, 3]}, {"min.insync.replicas": "2"})
    produce(c, topic, "a", 5)
    daemon = Daemon(proxy.bootstrap, topic, state, events)
    try:
        daemon.wait(lambda row: row[2] == 5, "the first position")
        written = 5
        for api_key, how in ((LIST_OFFSETS, "garbage"), (LIST_OFFSETS, "late"), (LIST_OFFSETS, "drop"),
                             (METADATA, "garbage"), (METADATA, "late"), (METADATA, "drop")):
            spoiled = len(proxy.spoiled)
            proxy.sabotage(api_key, how, count=2, late_s=2.5)
            produce(c, topic, how, 5)
            written += 5
            deadline = time.monotonic() + 30
            while proxy.sabotage_pending and time.monotonic() < deadline:
                time.sleep(0.05)
            assert proxy.spoiled[spoiled:] == [(api_key, how)] * 2, proxy.spoiled
            # the daemon lives on, and a later round reads what was written meanwhile
            daemon.wait(lambda row, n=written: row[2] == n, f"position {written} after {how} answers to {api_key}")

        # The leader (broker 1), as the watcher sees it, is down for 2 s: those rounds cost only its partition.
        proxy.down([0])
        try:
            produce(c, topic, "down", 5)  # through the brokers' own listener: the cluster is fine
            time.sleep(2.0)
            assert daemon.position()[2] == written  # type: ignore[index]  # nothing read from a broker down
        finally:
            proxy.down([])
        written += 5
        daemon.wait(lambda row, n=written: row[2] == n, "the position once the leader is back")

        # A clean leader change whose first validation is answered with garbage: validated next round, no event.
        epoch = daemon.position()[4]  # type: ignore[index]
        proxy.sabotage(OFFSETS_FOR_LEADER_EPOCH, "garbage", count=1)
        c.reorder_replicas(topic, 0, [2, 1, 3])
        c.elect_leaders(topic, 0, unclean=False)
        moved = c.wait_partition(topic, 0, lambda s: s.leader == 2, "leader 2 (preferred)").leader_epoch
        assert moved > epoch
        daemon.wait(lambda row: row[4] == moved, f"the position validated under epoch {moved}")
        assert proxy.spoiled[-1] == (OFFSETS_FOR_LEADER_EPOCH, "garbage")
        assert daemon.position()[:5] == [topic, 0, written, 0, moved]  # type: ignore[index]
    finally:
        code = daemon.stop()
    assert code == 0, daemon.errors()
    assert daemon.logged() == []  # nothing was lost, nothing said

    # Stopped, the leader moves back (a new epoch), records are written; restarted from its state file the
    # daemon validates the position it kept and follows on, silent.
    kept = daemon.position()
    c.reorder_replicas(topic, 0, [1, 2, 3])
    c.elect_leaders(topic, 0, unclean=False)
    back = c.wait_partition(topic, 0, lambda s: s.leader == 1, "leader 1 (preferred)").leader_epoch
    produce(c, topic, "z", 5)
    daemon = Daemon(proxy.bootstrap, topic, state, events)
    try:
        assert daemon.position() == kept
        daemon.wait(lambda row: row[2] == written + 5 and row[4] == back, "the restarted daemon's position")
    finally:
        code = daemon.stop()
    assert code == 0, daemon.errors()
    assert daemon.logged() == []
