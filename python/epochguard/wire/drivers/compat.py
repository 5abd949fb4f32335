"""`epochguard compat`: every real client x scenario x trigger against `epochguard serve`, as one table.

Each scenario x trigger is one `epochguard serve` run shared by all the clients installed here. A cell
holds the server's verdicts for that client (`-`: the fault never reached it: it was not served records
that were later replaced), then after ` · ` its record-level anomalies (`epochguard.wire.anomalies`:
phantom-read, rewind, skip, unseen, lost-ack, duplicate-write, send-reorder, aborted-read, torn-txn,
lso-stuck, producer-stuck); where the
client's own delivery log says otherwise (`truth.judge_client`), the cell shows both, `server != truth`,
so a disagreement is never hidden.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from epochguard.wire.anomalies import summary
from epochguard.wire.drivers.kafka_runs import KAFKA_SCENARIOS
from epochguard.wire.drivers.registry import CLIENTS, Client
from epochguard.wire.drivers.session import (
    CONTROLS,
    HANDOFF_SCENARIOS,
    PRODUCER_SCENARIOS,
    RACK_SCENARIOS,
    SCENARIOS,
    TRIGGERS,
    TXN_SCENARIOS,
    RunError,
    RunResult,
    allows_unclean,
    run_clients,
    run_handoff,
    serve_command,
)
from epochguard.wire.drivers.toolchain import ToolchainError
from epochguard.wire.drivers.truth import ClientTruth

__all__ = ["configure", "run_matrix", "format_table", "cell", "producer_cell", "truth_cell", "format_comparison",
           "write_docs"]


ALL = (*SCENARIOS, *CONTROLS, *TXN_SCENARIOS, *HANDOFF_SCENARIOS, *PRODUCER_SCENARIOS)


def serve_runs(scenarios: Sequence[str], triggers: Sequence[str]) -> list[tuple[str, str]]:
    """(scenario, trigger) pairs: each trigger for a consumer scenario, its own one for a producer scenario,
    those a transactional scenario has."""
    def of(s: str) -> Sequence[str]:
        if s in PRODUCER_SCENARIOS or s in HANDOFF_SCENARIOS:
            return ({**PRODUCER_SCENARIOS, **HANDOFF_SCENARIOS}[s],)
        return [t for t in triggers if t in TXN_SCENARIOS[s]] if s in TXN_SCENARIOS else triggers

    return [(s, t) for s in scenarios for t in of(s)]


def configure(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Run every installed real Kafka client (confluent-kafka, kafka-python, aiokafka, kcat, the Java client "
        "with either consumer, franz-go, sarama, kafka-go) through every "
        "`epochguard serve` scenario and trigger, and print the compatibility table (markdown): what each "
        "client did when records it had read were replaced, by the server's verdict, checked against the "
        "client's own delivery log.")
    parser.add_argument("--json", action="store_true", help="the last stdout line is every run's result as JSON")
    parser.add_argument("--out", type=Path, metavar="PATH", help="also write the markdown table here")
    parser.add_argument("--scenario", action="append", choices=sorted({*ALL, *KAFKA_SCENARIOS}),
                        metavar="NAME",
                        help=f"only this scenario (repeatable; default all: {', '.join(ALL)})")
    parser.add_argument("--trigger", action="append", choices=TRIGGERS, help="only this trigger (repeatable)")
    parser.add_argument("--client", action="append", choices=[c.name for c in CLIENTS], help="only this client")
    parser.add_argument("--seed", type=int, default=1, metavar="N", help="seed of every serve run")
    parser.add_argument("--keep", type=Path, metavar="DIR", help="keep delivery logs and traces under DIR")
    parser.add_argument("--docs", type=Path, metavar="DIR",
                        help="write the table between the compat markers of DIR/serve.md and its JSON form to "
                             "DIR/compat.json (`make compat`: DIR is the repository's docs); rows not run this "
                             "time keep their last result")
    parser.add_argument("--cluster", choices=("serve", "kafka"), default="serve",
                        help="kafka: also run the scenarios a real Apache Kafka 4.4 cluster reproduces "
                             f"({', '.join(KAFKA_SCENARIOS)}) on one (make kafka; Java 17), and print per client "
                             "and scenario the verdict against serve and against Kafka")
    parser.set_defaults(run=_run)


def _run(args: argparse.Namespace) -> int:
    clients = [c for c in CLIENTS if not args.client or c.name in args.client]
    missing = {c.name: m for c in clients if (m := _unready(c)) is not None}
    for name, why in missing.items():
        print(f"compat: skipping {name}: {why}", file=sys.stderr)
    clients = [c for c in clients if c.name not in missing]
    if not clients:
        print("compat: no real client installed (pip install 'epochguard[dev]')", file=sys.stderr)
        return 2
    if args.cluster == "kafka":
        return _run_kafka(args, clients)
    runs = serve_runs(args.scenario or ALL, args.trigger or TRIGGERS)
    with tempfile.TemporaryDirectory(prefix="epochguard-compat-") as tmp:
        results = run_matrix(runs, clients, Path(args.keep or tmp), seed=args.seed, progress=sys.stderr)
    table = format_table(results, clients)
    print(table)
    if args.out:
        args.out.write_text(table + "\n", encoding="utf-8")
    if args.json:
        print(json.dumps(_as_json(results, clients), separators=(",", ":")))
    if args.docs:
        write_docs(results, clients, args.docs, seed=args.seed)
    return 0


def _run_kafka(args: argparse.Namespace, clients: Sequence[Client]) -> int:
    from epochguard.kafka import KafkaNotProvisioned, find_java, kafka_jars
    from epochguard.wire.drivers.kafka_runs import run_kafka_matrix

    try:
        kafka_jars()
        find_java()
    except KafkaNotProvisioned as exc:
        print(f"compat: Apache Kafka: {exc}", file=sys.stderr)
        return 2
    scenarios = [s for s in (args.scenario or KAFKA_SCENARIOS) if s in KAFKA_SCENARIOS]
    runs = [(s, t) for s in scenarios for t in (args.trigger or ("served", "caught-up"))]
    with tempfile.TemporaryDirectory(prefix="epochguard-compat-") as tmp:
        work = Path(args.keep or tmp)
        served = run_matrix(runs, clients, work / "serve", seed=args.seed, progress=sys.stderr)
        real = run_kafka_matrix(runs, clients, work / "kafka", progress=sys.stderr)
    table, agree, cells = format_comparison(served, real, clients)
    print(table)
    print(f"\n{agree} of {cells} cells agree")
    if args.out:
        args.out.write_text(table + "\n", encoding="utf-8")
    if args.json:
        print(json.dumps({"serve": _as_json(served, clients), "kafka": _as_json(real, clients)},
                         separators=(",", ":")))
    return 0


def truth_cell(result: RunResult | str, client: Client) -> str:
    """The client's verdicts by its delivery log alone (`-`: none of its reads was replaced), or why its
    run broke: what a cell against Kafka, which no server judges, holds."""
    if isinstance(result, str):
        return "run failed"
    if client.name in result.failed:
        return "run failed"
    truth = result.truths.get(client.name)
    if truth is None:
        return "not run"
    found = summary(truth.anomalies)
    return _summary(Counter(d.verdict for d in truth.divergences)) + (f" · {_summary(found)}" if found else "")


def format_comparison(
    served: dict[tuple[str, str], RunResult | str], real: dict[tuple[str, str], RunResult | str],
    clients: Sequence[Client],
) -> tuple[str, int, int]:
    """A row per scenario x trigger, a cell per client: `serve / kafka` verdicts and record-level anomalies
    by the delivery-log truth (the same judge on both: which verdicts and which anomalies, not how many),
    marked `≠` where the verdicts differ and `≈` where only the anomalies' names do. Returns the table, the
    cells whose verdicts agree and all cells."""
    header = "| scenario | trigger | " + " | ".join(c.name for c in clients) + " |"
    rows = [header, "|" + "---|" * (2 + len(clients))]
    agree = cells = 0
    for key in real:
        scenario, trigger = key
        out = []
        for c in clients:
            s, k = _verdict_set(served.get(key, "not run"), c), _verdict_set(real[key], c)
            same = s == k and s is not None
            agree += same
            cells += 1
            text = f"{truth_cell(served.get(key, 'not run'), c)} / {truth_cell(real[key], c)}"
            named = _anomaly_set(served.get(key, "not run"), c) == _anomaly_set(real[key], c)
            out.append(f"**≠** {text}" if not same else text if named else f"**≈** {text}")
        rows.append(f"| {scenario} | {trigger} | " + " | ".join(out) + " |")
    return "\n".join(rows), agree, cells


def _anomaly_set(result: RunResult | str, client: Client) -> frozenset[str] | None:
    if isinstance(result, str) or client.name in result.failed or client.name not in result.truths:
        return None
    return frozenset(summary(result.truths[client.name].anomalies))


def _verdict_set(result: RunResult | str, client: Client) -> frozenset[str] | None:
    if isinstance(result, str) or client.name in result.failed or client.name not in result.truths:
        return None
    return frozenset(d.verdict for d in result.truths[client.name].divergences)


def _unready(client: Client) -> str | None:
    """What keeps `client` from running here, after building its driver if it needs one."""
    missing = client.missing()
    if missing is None:
        try:
            client.prepare()
        except ToolchainError as exc:
            missing = str(exc)
    return missing


def run_matrix(
    runs: Sequence[tuple[str, str]], clients: Sequence[Client], workdir: Path, *, seed: int = 1,
    progress: Any = None,
) -> dict[tuple[str, str], RunResult | str]:
    """One serve run per (scenario, trigger); a run that broke is kept as its error text."""
    results: dict[tuple[str, str], RunResult | str] = {}
    for scenario, trigger in runs:
        # A producer scenario runs the clients whose producer can be idempotent, asked to be.
        producing, rack = scenario in PRODUCER_SCENARIOS, RACK_SCENARIOS.get(scenario)
        # A rack scenario runs the clients that can fetch from a follower, each given the rack; a
        # transactional one those whose consumer can read committed, asked to.
        committed, handoff = scenario in TXN_SCENARIOS, scenario in HANDOFF_SCENARIOS
        groups = run_groups([c for c in clients if c.idempotent is not None] if producing
                            else [c for c in clients if c.rack is not None] if rack
                            else [c for c in clients if c.isolation is not None] if committed
                            else [c for c in clients if c.group] if handoff else clients)
        driver_args: dict[str, Sequence[str]] | None = (
            {c.name: c.idempotent or () for c in clients} if producing
            else {c.name: c.rack_args(rack) for c in clients} if rack
            else {c.name: c.isolation_args() for c in clients} if committed else None)
        parts: list[tuple[Sequence[Client], RunResult | str]] = []
        for i, group in enumerate(groups):
            run_dir = workdir / f"{scenario}-{trigger}" / (f"group-{i}" if len(groups) > 1 else "")
            if progress is not None:
                names = f" ({', '.join(c.name for c in group)})" if len(groups) > 1 else ""
                print(f"compat: {scenario} --trigger {trigger}{names} ...", file=progress, flush=True)
            try:
                command = serve_command(scenario, trigger, seed, trace=run_dir / "trace.jsonl", consumers=len(group))
                if handoff:
                    parts.append((group, run_handoff(command, group, run_dir, unclean=allows_unclean(scenario))))
                    continue
                parts.append((group, run_clients(command, group, run_dir, driver_args=driver_args,
                                                 unclean=allows_unclean(scenario), read_committed=committed)))
            except (RunError, OSError, TimeoutError) as exc:
                parts.append((group, f"run failed: {exc}"))
        results[(scenario, trigger)] = merge_runs(parts)
    return results


def run_groups(clients: Sequence[Client]) -> list[list[Client]]:
    """The clients sharing one serve run: the Python-driven ones, the Java ones, the Go ones. The server's
    trigger waits for every consumer of a run, so a client that is up in 0.1 s (Go) idles at the log end
    while two JVMs start (2-6 s on a loaded 2-core machine); idle past the 10 s stuck bound before the
    fault, it is judged stuck after it. Clients that start alike share a run."""
    groups: dict[str | None, list[Client]] = {}
    for c in clients:
        groups.setdefault(c.toolchain, []).append(c)
    return list(groups.values())


def merge_runs(parts: Sequence[tuple[Sequence[Client], RunResult | str]]) -> RunResult | str:
    """One result for one scenario x trigger run in several groups; a group's failure is kept per client."""
    done = [r for _, r in parts if not isinstance(r, str)]
    if not done:
        return "; ".join(str(r) for _, r in parts)
    if len(parts) == 1:
        return done[0]
    failed = {c.name: r for group, r in parts if isinstance(r, str) for c in group}
    return RunResult(
        bootstrap=";".join(r.bootstrap for r in done),
        logs={k: v for r in done for k, v in r.logs.items()},
        final=done[0].final,
        truths={k: v for r in done for k, v in r.truths.items()},
        server_report={"clients": [c for r in done for c in (r.server_report or {}).get("clients", [])]},
        server_stdout=[line for r in done for line in r.server_stdout],
        failed=failed,
    )


def cell(result: RunResult, client: Client) -> str:
    """`detected/rewound`, `silent x3`, `false-alarm`, `out-of-range/start`, `-`; `server != truth` where the
    delivery log disagrees."""
    if client.name in result.failed:
        return result.failed[client.name]
    server = result.server_client(client.client_id)
    if server is None:
        return "not seen"
    # A divergence of transaction markers only (‡: marker-truncated's lost ABORT) replaced no record the client
    # consumed: its delivery log cannot see it, so it is shown and not compared; the re-read that follows it
    # (a rewind or reset to the marker's offset, or below) is the log's false alarm.
    marker = any(d.get("marker") for d in server.get("divergences", []))
    verdicts = Counter(_label(d["verdict"], d.get("how", "")) + ("‡" if d.get("marker") else "")
                       for d in server.get("divergences", []))
    # Back at the log start where the divergence began, the log reads a reset as a rewind: where the server
    # saw the ListOffsets, its `reset/back` stands; where no client of the run told the phantoms' epoch, the log
    # reads an undetectable divergence as silent (or rewound): the server's `undetectable` stands. Either cell
    # is marked (†), not shown as a disagreement (`Divergence.reads_as`).
    divergences, said = result.truths[client.name].divergences, set(verdicts)
    truth = Counter(_label(*d.reads_as(said)) for d in divergences)
    marked = any(d.reads_as(said) != (d.verdict, d.how) for d in divergences)
    # Going back though nothing diverged: after a short validation answer (server), a re-read (the log).
    verdicts.update("false-alarm" for _ in server.get("false_alarms", ()))
    truth.update("false-alarm" for _ in ([] if marker else result.truths[client.name].rewinds))
    # A position below the log start (log-start-jump): where the client went on, as each side saw it.
    verdicts.update(_label("out-of-range", o["how"]) for o in server.get("out_of_range", ()))
    truth.update(_label("out-of-range", o.how) for o in result.truths[client.name].out_of_range)
    # The same verdicts agree even when the server split one divergence into several events.
    compared = {v for v in verdicts if not v.endswith("‡")}
    text = _summary(verdicts) if compared == set(truth) else f"{_summary(verdicts)} != {_summary(truth)}"
    text += "†" if marked else ""
    # A stuck client that kept asking: only the server sees requests, so it is a note, not a verdict. So is
    # where a client went after a follower's OFFSET_OUT_OF_RANGE (follower-fetch-lag): to the leader, the
    # replica again, or a reset (whose cost the log sees: a re-read, or a skip).
    follower = Counter(_label("follower", e["how"]) for e in server.get("follower_out_of_range", ()))
    # Transaction markers handed to the application as records: only the delivery log sees them (kafka-go).
    markers = result.truths[client.name].markers_read
    notes = [*(["spin"] if any(d.get("spin") for d in server.get("divergences", [])) else []),
             *([_summary(follower)] if follower else []), *([f"markers read x{markers}"] if markers else []),
             *([hints] if (hints := hint_text(server)) else [])]
    text += f" ({'; '.join(notes)})" if notes else ""
    return text + anomaly_text(server, result.truths[client.name], marker=marker)


def hint_text(server: dict[str, Any]) -> str:
    """What a client did with stale KIP-951 leader hints (stale-leader-hint), from the server's trace alone:
    `hint-regress x2` (followed a hint no newer than it knew to a broker that did not lead: the check),
    `hint/metadata x3` (asked for metadata first), `hint/followed` (a newer hint naming the wrong node, followed),
    `hint/elsewhere`, `hint/retried`, `hint/stopped`; empty when it met none."""
    def key(h: dict[str, Any]) -> tuple[Any, ...]:
        return h["topic"], h["partition"], h["api"], h["step"]

    regress = {key(h) for h in server.get("hint_regress", ())}  # the judge's check (`ClientReport.hint_regress`)
    said = Counter("hint-regress" if key(h) in regress else _label("hint", h["how"] or "undecided")
                   for h in server.get("leader_hints", ()))
    return _summary(said) if said else ""


def anomaly_text(server: dict[str, Any], truth: ClientTruth, *, marker: bool = False) -> str:
    """` · phantom-read x3, skip`: the client's record-level anomalies (`epochguard.wire.anomalies`), by
    name, `server != truth` where the two histories disagree on which (counts differ by design: the
    server counts served batches and acknowledged batches, the delivery log records); empty when none.
    `marker`: a transaction's marker was lost (‡); the server's aborted reads are then of records its
    producer was told were aborted and the final log holds committed (KAFKA-20716), which the delivery
    log cannot call aborted: shown with ‡, not compared."""
    said: Counter[str] = Counter()
    for a in server.get("anomalies", ()):
        said[f"{a['anomaly']}/{a['tag']}" if a.get("tag") else a["anomaly"]] += 1
    logged = summary(truth.anomalies)
    if marker and "aborted-read" in said and "aborted-read" not in logged:
        said["aborted-read‡"] = said.pop("aborted-read")
        if set(said) - {"aborted-read‡"} == set(logged):
            return f" · {_summary(said)}"
    if not said and not logged:
        return ""
    both = _summary(said) if set(said) == set(logged) else f"{_summary(said)} != {_summary(logged)}"
    return f" · {both}"


def producer_cell(result: RunResult, client: Client) -> str:
    """An idempotent producer's outcome after its acknowledged tail was lost (`clean`, `duplicate`, `fatal`;
    `-`: never answered OUT_OF_ORDER_SEQUENCE_NUMBER), `server != truth` where its delivery log disagrees;
    `n/a` for a client whose driver has no idempotent producer."""
    if client.idempotent is None:
        return "n/a"
    if client.name in result.failed:
        return result.failed[client.name]
    server = result.server_client(client.client_id)
    if server is None or client.name not in result.truths:
        return "not seen"
    said = sorted({e["outcome"] for e in server.get("sequence_errors", ())})
    truth = result.truths[client.name].producer_outcome
    text = ", ".join(said) or "-"
    # Without a sequence error the log has nothing to say (its `clean` is the default): no disagreement.
    text = text if not said or said == [truth] else f"{text} != {truth}"
    return text + anomaly_text(server, result.truths[client.name])


def _cell(scenario: str) -> Callable[[RunResult, Client], str]:
    """How a scenario's cells are judged: on the consumers' verdicts, or on the producers' outcome."""
    if scenario in RACK_SCENARIOS:
        return rack_cell
    if scenario in TXN_SCENARIOS:
        return txn_cell
    if scenario in HANDOFF_SCENARIOS:
        return handoff_cell
    return producer_cell if scenario in PRODUCER_SCENARIOS else cell


def rack_cell(result: RunResult, client: Client) -> str:
    """A consumer cell, `n/a` for a client that cannot fetch from a follower (no `Client.rack`: sat out)."""
    return "n/a" if client.rack is None else cell(result, client)


def txn_cell(result: RunResult, client: Client) -> str:
    """A consumer cell, `n/a` for a client whose consumer cannot read committed (no `Client.isolation`)."""
    return "n/a" if client.isolation is None else cell(result, client)


def handoff_cell(result: RunResult, client: Client) -> str:
    """The member that took the partition over (B), as a consumer cell; `n/a` for a client that cannot be a
    group member against serve (`Client.group_na`), `not run` for one whose driver has no group mode yet."""
    if client.group_na is not None:
        return "n/a"
    return "not run: its driver has no group mode" if not client.group else cell(result, client)


def _label(verdict: str, how: str) -> str:
    """`detected/raised`, `reset/back`, `silent`: the verdict and how, as both sides name them."""
    return f"{verdict}/{how}" if how else verdict


def _summary(verdicts: Counter[str]) -> str:
    if not verdicts:
        return "-"
    return ", ".join(v if n == 1 else f"{v} x{n}" for v, n in sorted(verdicts.items()))


def format_table(results: dict[tuple[str, str], RunResult | str], clients: Sequence[Client]) -> str:
    header = "| scenario | trigger | " + " | ".join(_client_label(results, c) for c in clients) + " |"
    rows = [header, "|" + "---|" * (2 + len(clients))]
    for (scenario, trigger), result in results.items():
        cells = [result] * len(clients) if isinstance(result, str) else [_cell(scenario)(result, c) for c in clients]
        rows.append(f"| {scenario} | {trigger} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def _client_label(results: dict[tuple[str, str], RunResult | str], client: Client) -> str:
    """The client and the version its driver reported; the client's name first where the software's is
    another (`java-classic (kafka-clients 4.4.0)`: two columns run the same library)."""
    for result in results.values():
        if not isinstance(result, str) and client.name in result.truths and result.truths[client.name].consumed:
            software = result.truths[client.name].software
            return software if software.startswith(client.name) else f"{client.name} ({software})"
    return client.name


DOC_START, DOC_END = "<!-- compat:start -->", "<!-- compat:end -->"


def write_docs(results: dict[tuple[str, str], RunResult | str], clients: Sequence[Client], docs: Path, *,
               seed: int) -> None:
    """`docs/compat.json` ({"seed", "labels", "rows": [{"scenario", "trigger", "cells": {client: cell}}]}) and
    the table rendered from it between the compat markers of `docs/serve.md`. Rows of this run replace
    theirs; rows and clients not run this time keep their last cells, so one scenario can be re-run alone."""
    cells = {key: {c.name: result if isinstance(result, str) else _cell(key[0])(result, c) for c in clients}
             for key, result in results.items()}
    merge_docs(cells, {c.name: _client_label(results, c) for c in clients}, docs, seed=seed)


def merge_docs(cells: dict[tuple[str, str], dict[str, str]], labels: dict[str, str], docs: Path, *,
               seed: int) -> None:
    """`write_docs` on cells already made: {(scenario, trigger): {client: cell}} and {client: column label}."""
    data_path, page = docs / "compat.json", docs / "serve.md"
    text = page.read_text(encoding="utf-8")
    head, start, rest = text.partition(DOC_START)
    _, end, tail = rest.partition(DOC_END)
    if not start or not end:  # checked first: nothing is written for a page that cannot take the table
        raise ValueError(f"{page} has no {DOC_START} ... {DOC_END} block to write the table into")
    old = json.loads(data_path.read_text(encoding="utf-8")) if data_path.exists() else {}
    rows = {(r["scenario"], r["trigger"]): r["cells"] for r in old.get("rows", [])}
    # A client that sat a run out reported no version: its label from an earlier run stays.
    labels = {**labels, **old.get("labels", {}), **{n: label for n, label in labels.items() if label != n}}
    for key, fresh in cells.items():
        rows[key] = {**rows.get(key, {}), **fresh}
    order = {name: i for i, name in enumerate(dict.fromkeys((*ALL, *KAFKA_SCENARIOS)))}
    ranked = sorted(rows, key=lambda k: (order.get(k[0], len(order)), k[0],
                                         TRIGGERS.index(k[1]) if k[1] in TRIGGERS else len(TRIGGERS)))
    data = {"seed": seed, "labels": labels,
            "rows": [{"scenario": s, "trigger": t, "cells": rows[(s, t)]} for s, t in ranked]}
    data_path.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    names = [c.name for c in CLIENTS if c.name in labels]
    table = ["| scenario | trigger | " + " | ".join(labels[n] for n in names) + " |", "|" + "---|" * (2 + len(names))]
    table += [f"| {s} | {t} | " + " | ".join(rows[(s, t)].get(n, "not run") for n in names) + " |" for s, t in ranked]
    block = (f"{DOC_START}\nGenerated by `epochguard compat --docs docs` (`make compat`; seed {seed}) into this page "
             f"and `docs/compat.json`; do not edit by hand.\n\n" + "\n".join(table) + f"\n{DOC_END}")
    page.write_text(head + block + tail, encoding="utf-8")


def _as_json(results: dict[tuple[str, str], RunResult | str], clients: Sequence[Client]) -> dict[str, Any]:
    runs = []
    for (scenario, trigger), result in results.items():
        entry: dict[str, Any] = {"scenario": scenario, "trigger": trigger}
        if isinstance(result, str):
            entry["error"] = result
        else:
            entry["clients"] = [_client_json(result, c, _cell(scenario)(result, c)) for c in clients]
        runs.append(entry)
    return {"runs": runs}


def _client_json(result: RunResult, c: Client, text: str) -> dict[str, Any]:
    if c.name in result.failed:
        return {"client": c.name, "error": result.failed[c.name]}
    if c.name not in result.truths:  # sat out a producer scenario: no idempotent producer
        return {"client": c.name, "cell": text}
    truth = result.truths[c.name]
    return {"client": c.name, "cell": text, "server": result.server_client(c.client_id),
            "truth": [d.__dict__ for d in truth.divergences], "lost_acked": len(truth.lost_acked),
            "truth_anomalies": [a.to_json() for a in truth.anomalies],
            "producer_outcome": truth.producer_outcome}
