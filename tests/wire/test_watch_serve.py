"""`epochguard watch` (its driver, `epochguard.ops.watch.watch`, on the client's network layer) against every
scenario of `epochguard serve`, judged by the scenario's own truth, not by numbers written here.

The truth (`ElectionTruth`, an observer of the served cluster): at every change of a partition's leader,
the committed records the old leader held (below its high watermark) that the new leader does not hold at
the same offset in the same epoch. Each such loss must be exactly one `truncation` event, [first lost,
the last high watermark the old leader gave out on the wire); every scenario without one (`clean`,
`false-divergence`, `epoch-flap`, `leader-bounce`, `stale-leader-hint` among them) must give no event.
Both topics are watched: the scenario's `events` (its simulated producers write there) and `input`, where
an acks=all producer of epochguard's client writes every 20 ms, as the compat drivers do
(`idempotent-truncation` truncates there).
No client consumes: each TRIGGER stage fires after its time-out (2 s here), by which time the watcher has
read the high watermark the faults start from (the truncating scenarios pause their producers before them).

`EPOCHGUARD_WATCH_SERVE_TABLE=PATH` writes the table of docs/watch.md (scenario x what the watcher reported).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
from pathlib import Path
from typing import Any

import pytest

from epochguard.client import AsyncProducer
from epochguard.errors import Errors
from epochguard.ops.watch import EventLog, watch
from epochguard.protocol.messages import ListOffsetsResponse
from epochguard.types import TopicPartition
from epochguard.wire.scenarios import INPUT, SCENARIOS
from epochguard.wire.server import WireServer

pytestmark = [pytest.mark.no_mutants]

NO_EVENT = ("clean", "false-divergence", "epoch-flap", "leader-bounce", "stale-leader-hint")


class ElectionTruth:
    """Observer of a `WireCluster`: what each change of leader lost (see the module docstring).

    While a broker acts as a partition's leader (alive, leader in its own view: a zombie too), its log is
    snapshot whenever its high watermark or log end moves: the last snapshot of each leadership is what
    it held when it stopped leading. Each leadership is compared with the next one, in epoch order: the
    records the first held below its high watermark that the second's log does not hold at the same
    offset in the same epoch are lost. `exposed` is the last high watermark each leadership gave out on
    the wire (ListOffsets): records above it (written after the watcher's last round, if any) were
    committed but never visible to anyone, outside the watcher's sight by design."""

    def __init__(self) -> None:
        # (tp, broker, epoch) -> (high watermark, log end, log start, {offset: epoch} of the whole log)
        self.led: dict[tuple[TopicPartition, int, int], tuple[int, int, int, dict[int, int]]] = {}
        self.exposed: dict[tuple[TopicPartition, int, int], int] = {}
        self.wire: Any = None  # the served cluster, from the first step

    def on_exchange(self, conn: Any, header: Any, request: Any, response: Any, *args: Any) -> None:
        if isinstance(response, ListOffsetsResponse):
            for a in response.partitions:
                if a.error_code == Errors.NONE and a.offset >= 0:
                    self.exposed[(a.tp, conn.broker_id, a.leader_epoch)] = a.offset
            if self.wire is not None:  # the leader's log as it was when it gave this answer out, not a step later
                self.on_step(self.wire)

    def on_fault(self, *args: Any) -> None:
        pass

    def on_step(self, wire: Any) -> None:
        self.wire = wire
        for b, broker in wire.cluster.brokers.items():
            if not broker.alive:
                continue
            for tp, partition in broker.manager.partitions.items():
                if not partition.is_leader:
                    continue
                log, key = partition.log, (tp, b, partition.leader_epoch)
                was = self.led.get(key)
                if was is None or was[:3] != (log.high_watermark, log.log_end_offset, log.log_start_offset):
                    held = log.records_between(log.log_start_offset, log.log_end_offset)
                    self.led[key] = (log.high_watermark, log.log_end_offset, log.log_start_offset,
                                     {o: r[0] for o, r in held.items()})

    @property
    def elections(self) -> int:
        return len(self.led) - len({tp for tp, _, _ in self.led})

    @property
    def losses(self) -> list[dict[str, Any]]:
        out = []
        for tp in sorted({tp for tp, _, _ in self.led}):
            terms = sorted((e, b) for t, b, e in self.led if t == tp)
            for (e0, b0), (e1, b1) in itertools.pairwise(terms):
                hw, _, _, old = self.led[(tp, b0, e0)]
                _, _, start, new = self.led[(tp, b1, e1)]
                # below the new leader's log start: deleted (DeleteRecords, retention), not lost
                lost = sorted(o for o, epoch in old.items() if start <= o < hw and new.get(o) != epoch)
                if lost:
                    out.append({"topic": tp.topic, "partition": tp.partition, "lost": lost, "hw": hw,
                                "exposed": self.exposed.get((tp, b0, e0), -1), "old_epoch": e0, "new_epoch": e1})
        return out


async def produce_input(bootstrap: str, stop: asyncio.Event) -> None:
    """acks=all records to `input` every 20 ms until `stop` (a record that fails is the scenario's business)."""
    producer = AsyncProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=0, client_id="watch-input")
    try:
        n = 0
        while not stop.is_set():
            await producer.send(INPUT, f"input-{n}".encode(), partition=0)
            n += 1
            await asyncio.sleep(0.02)
    finally:
        await producer.close(timeout=1)


async def watched(name: str, events: Path) -> tuple[list[dict[str, Any]], ElectionTruth, bool]:
    """One serve run of `name` under the watcher (100 ms rounds) until it settled and 1 s more; whether it
    settled."""
    scenario = SCENARIOS[name]()
    server = WireServer(scenario, seed=1, trigger="served", timeout_s=0.5)
    bootstrap = await server.start()
    truth = ElectionTruth()
    assert server.endpoint is not None and server.runner is not None
    server.endpoint.wire.observers.append(truth)
    serving = asyncio.create_task(server.run())
    stop = asyncio.Event()
    log = EventLog(events)
    watching = asyncio.create_task(watch(bootstrap, interval_ms=100, events=log, stop=stop, request_timeout_ms=2000))
    producing = asyncio.create_task(produce_input(bootstrap, stop))
    try:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 60
        while not server.runner.settled and loop.time() < deadline and not watching.done():
            await asyncio.sleep(0.05)
        settled = server.runner.settled
        await asyncio.sleep(1.0)
    finally:
        stop.set()
        await watching
        await asyncio.gather(producing, return_exceptions=True)
        log.close()
        server.stop()
        await serving
    lines = [json.loads(line) for line in events.read_text().splitlines()] if events.exists() else []
    return lines, truth, settled


def expected(truth: ElectionTruth) -> list[tuple[str, int, int, int]]:
    """(topic, partition, lost_from, lost_until) of every loss: the committed tail of the old leader from the
    first lost record, up to the last high watermark it gave out (at most its own)."""
    out = []
    for loss in truth.losses:
        lost = loss["lost"]
        assert lost == list(range(lost[0], loss["hw"])), loss  # the committed tail of the old leader, whole
        assert lost[0] < loss["exposed"] <= loss["hw"], loss
        out.append((loss["topic"], loss["partition"], lost[0], loss["exposed"]))
    return out


def reported(lines: list[dict[str, Any]]) -> list[tuple[str, int, int, int]]:
    return [(e["topic"], e["partition"], e["lost_from"], e["lost_until"]) for e in lines if e["event"] == "truncation"]


def describe(name: str, lines: list[dict[str, Any]], truth: ElectionTruth) -> str:
    """The docs' table row: the scenario, its leader changes, serve's truth, what the watcher said."""
    said = [f"`truncation` `{e['topic']}-{e['partition']}` [{e['lost_from']}, {e['lost_until']}) (epoch "
            f"{e['old_epoch']} -> {e['new_epoch']})" for e in lines if e["event"] == "truncation"]
    said += [f"`{e['event']}`: {e.get('message', '')}" for e in lines if e["event"] != "truncation"]
    losses = "; ".join(
        f"`{loss['topic']}-{loss['partition']}` [{loss['lost'][0]}, {loss['hw']})"
        + ("" if loss["exposed"] == loss["hw"] else f" (high watermark last given out: {loss['exposed']})")
        for loss in truth.losses) or "none"
    return f"| `{name}` | {truth.elections} | {losses} | {'; '.join(said) or 'no event'} |"


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[list[dict[str, Any]], ElectionTruth, bool]]:
    """Every scenario once, several at a time (each server steps on its own clock; the watcher's rounds and
    serve's steps are independent of each other's pace)."""
    out: dict[str, tuple[list[dict[str, Any]], ElectionTruth, bool]] = {}
    base = tmp_path_factory.mktemp("watch-serve")

    async def all_of() -> None:
        names, at_once = list(SCENARIOS), 6
        for i in range(0, len(names), at_once):
            batch = names[i:i + at_once]
            done = await asyncio.gather(*(watched(n, base / f"{n}.jsonl") for n in batch))
            out.update(zip(batch, done, strict=True))

    asyncio.run(all_of())
    table = os.environ.get("EPOCHGUARD_WATCH_SERVE_TABLE")
    if table:
        rows = ["| scenario | leader changes | committed records lost (serve's truth) | what the watcher reported |",
                "|---|---|---|---|", *(describe(n, *out[n][:2]) for n in SCENARIOS)]
        Path(table).write_text("\n".join(rows) + "\n")
    return out


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_every_serve_scenario_under_the_watcher_reports_exactly_its_truth(
    runs: dict[str, tuple[list[dict[str, Any]], ElectionTruth, bool]], name: str,
) -> None:
    lines, truth, settled = runs[name]
    assert settled, f"{name} did not settle in 60 s"
    assert [e for e in lines if e["event"] == "warning"] == []
    assert sorted(reported(lines)) == sorted(expected(truth)), describe(name, lines, truth)
    if name in NO_EVENT:
        assert lines == [] and truth.losses == []
    said = sorted((e["topic"], e["partition"], e["old_epoch"], e["new_epoch"]) for e in lines if e["event"] == "truncation")
    for got, loss in zip(said, sorted(truth.losses, key=lambda x: (x["topic"], x["partition"], x["old_epoch"])),
                         strict=True):
        assert got[2] == loss["old_epoch"] and got[3] >= loss["new_epoch"], (got, loss)
