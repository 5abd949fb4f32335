"""The compatibility table's cells: the server's verdicts, and both sides when the delivery log disagrees."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from epochguard.wire.drivers.compat import cell, format_table, merge_runs, producer_cell, run_groups, serve_runs
from epochguard.wire.drivers.registry import CLIENTS, client
from epochguard.wire.drivers.session import TRIGGERS, RunResult
from epochguard.wire.drivers.truth import ClientTruth, Divergence, FinalLog, OutOfRange

EMPTY = FinalLog({}, {}, {})
EMPTY_PATH = Path("/nonexistent/java-classic.jsonl")


def result(server: list[str] | None, truth: list[str], software: str = "kafka-python 3.0.12",
           how: tuple[str, str] = ("", "")) -> RunResult:
    divs = [Divergence("events", 0, 25, 30, 6, v, 31, how=how[1]) for v in truth]
    clients = [] if server is None else [{
        "client_id": "epochguard-kafka-python", "software": software,
        "divergences": [{"topic": "events", "partition": 0, "offset": 25, "verdict": v, "how": how[0]}
                        for v in server],
    }]
    truth = ClientTruth("epochguard-kafka-python", software, divs, consumed=10)
    return RunResult("b", {}, EMPTY, {"kafka-python": truth},
                     {"clients": clients})


def test_cells() -> None:
    kp = client("kafka-python")
    assert cell(result([], []), kp) == "-"
    assert cell(result(["silent"], ["silent"]), kp) == "silent"
    assert cell(result(["silent"] * 3, ["silent"]), kp) == "silent x3"  # one divergence, three server events
    assert cell(result(["silent"], ["detected"]), kp) == "silent != detected"
    assert cell(result(["silent", "reset"], ["silent"]), kp) == "reset, silent != silent"
    assert cell(result(None, []), kp) == "not seen"
    # how each side says it was detected is part of the cell: a rewind the log saw as raised disagrees
    assert cell(result(["detected"], ["detected"], how=("rewound", "rewound")), kp) == "detected/rewound"
    assert cell(result(["detected"], ["detected"], how=("rewound", "raised")), kp) == \
        "detected/rewound != detected/raised"
    spun = result(["stuck"], ["stuck"])
    spun.server_report["clients"][0]["divergences"][0]["spin"] = "OffsetForLeaderEpoch x412"
    assert cell(spun, kp) == "stuck (spin)"  # only the server sees requests: a note, not a verdict
    alarmed = result([], [])
    alarmed.server_report["clients"][0]["false_alarms"] = [{"offset": 20, "answer": 20, "served_end": 25}]
    assert cell(alarmed, kp) == "false-alarm != -"
    alarmed.truths["kafka-python"].rewinds.append(("events", 0, 20, 5))
    assert cell(alarmed, kp) == "false-alarm"
    jumped = result([], [])
    jumped.server_report["clients"][0]["out_of_range"] = [{"offset": 5, "log_start": 12, "how": "start"}]
    assert cell(jumped, kp) == "out-of-range/start != -"
    jumped.truths["kafka-python"].out_of_range.append(OutOfRange("events", 0, 5, 12, 17, "forward", 5))
    assert cell(jumped, kp) == "out-of-range/start != out-of-range/forward"


def test_a_reset_the_log_reads_as_a_rewind_at_the_log_start_is_marked_not_a_disagreement() -> None:
    kp = client("kafka-python")
    alike = result(["reset"], ["detected"], how=("back", "rewound"))
    divs = alike.truths["kafka-python"].divergences
    assert cell(alike, kp) == "reset/back != detected/rewound"  # above the log start: a real disagreement
    divs[0] = replace(divs[0], at_log_start=True)
    assert cell(alike, kp) == "reset/back†"
    rewound = result(["detected"], ["detected"], how=("rewound", "rewound"))
    rewound.truths["kafka-python"].divergences[0] = replace(rewound.truths["kafka-python"].divergences[0],
                                                             at_log_start=True)
    assert cell(rewound, kp) == "detected/rewound"  # both say rewound: no mark
    silent = result(["silent"], ["detected"], how=("", "rewound"))
    silent.truths["kafka-python"].divergences[0] = replace(silent.truths["kafka-python"].divergences[0],
                                                            at_log_start=True)
    assert cell(silent, kp) == "silent != detected/rewound"  # only a reset is read alike


def test_table_rows_and_labels() -> None:
    kp = client("kafka-python")
    table = format_table({("unclean-election", "served"): result(["reset"], ["reset"]),
                          ("zombie-leader", "served"): "run failed: boom"}, [kp])
    lines = table.splitlines()
    assert lines[0] == "| scenario | trigger | kafka-python 3.0.12 |"
    assert lines[2] == "| unclean-election | served | reset |"
    assert lines[3] == "| zombie-leader | served | run failed: boom |"


def test_java_and_go_clients_run_in_a_group_of_their_own() -> None:
    groups = run_groups(CLIENTS)
    assert [[c.name for c in g] for g in groups] == [
        ["confluent-kafka", "kafka-python", "aiokafka", "kcat", "epochguard", "epochguard-asyncio"],
        ["java-classic", "java-consumer"], ["franz-go", "sarama", "kafka-go"]]
    assert run_groups([client("sarama")]) == [[client("sarama")]]


def test_merged_groups_keep_each_clients_cell_and_failure() -> None:
    kp, java, go = client("kafka-python"), client("java-classic"), client("franz-go")
    java_truth = ClientTruth("epochguard-java-classic", "kafka-clients 4.4.0",
                             [Divergence("events", 0, 25, 30, 6, "detected", 25)], consumed=10)
    java_run = RunResult("j", {"java-classic": EMPTY_PATH}, EMPTY, {"java-classic": java_truth}, {"clients": [{
        "client_id": "epochguard-java-classic",
        "divergences": [{"topic": "events", "partition": 0, "offset": 25, "verdict": "detected"}]}]})
    merged = merge_runs([([kp], result(["reset"], ["reset"])), ([java], java_run), ([go], "run failed: boom")])
    assert not isinstance(merged, str)
    assert [cell(merged, c) for c in (kp, java, go)] == ["reset", "detected", "run failed: boom"]
    table = format_table({("unclean-election", "served"): merged}, [kp, java, go]).splitlines()
    assert table[0] == "| scenario | trigger | kafka-python 3.0.12 | java-classic (kafka-clients 4.4.0) | franz-go |"
    assert table[2] == "| unclean-election | served | reset | detected | run failed: boom |"
    assert merge_runs([([kp], "run failed: a"), ([go], "run failed: b")]) == "run failed: a; run failed: b"


def producing(outcomes: list[str], truth: str, name: str = "confluent-kafka") -> RunResult:
    """A producer-scenario run of one client: the server's sequence-error outcomes, its log's outcome."""
    log = ClientTruth(f"epochguard-{name}", "librdkafka 2.16.0", [], producer_outcome=truth)
    return RunResult("b", {}, EMPTY, {name: log}, {"clients": [{
        "client_id": f"epochguard-{name}", "divergences": [],
        "sequence_errors": [{"error": "OUT_OF_ORDER_SEQUENCE_NUMBER", "outcome": o} for o in outcomes]}]})


def test_producer_cells_name_the_outcome_and_both_sides_when_they_differ() -> None:
    ck = client("confluent-kafka")
    assert producer_cell(producing(["fatal", "fatal"], "fatal"), ck) == "fatal"
    assert producer_cell(producing(["clean"], "duplicate"), ck) == "clean != duplicate"
    assert producer_cell(producing([], "clean"), ck) == "-"  # never desynchronized: nothing to judge
    assert producer_cell(producing(["clean"], "clean"), client("kcat")) == "n/a"  # no idempotent producer
    failed = producing([], "clean")
    failed.failed["confluent-kafka"] = "run failed: boom"
    assert producer_cell(failed, ck) == "run failed: boom"


def test_producer_scenarios_run_once_with_their_trigger_and_only_idempotent_clients() -> None:
    assert serve_runs(["unclean-election", "idempotent-truncation"], TRIGGERS) == [
        ("unclean-election", "served"), ("unclean-election", "caught-up"), ("idempotent-truncation", "ack")]
    assert {c.name for c in CLIENTS if c.idempotent is not None} == {
        "confluent-kafka", "kafka-python", "aiokafka", "java-classic", "java-consumer", "franz-go", "sarama",
        "epochguard", "epochguard-asyncio"}
    table = format_table({("idempotent-truncation", "ack"): producing(["fatal"], "fatal")},
                         [client("confluent-kafka"), client("kafka-go")]).splitlines()
    assert table[2] == "| idempotent-truncation | ack | fatal | n/a |"


def test_cells_name_the_anomalies_of_both_histories() -> None:
    from epochguard.wire.anomalies import Anomaly

    kp = client("kafka-python")
    r = result(["silent"], ["silent"])
    server = r.server_report["clients"][0]
    server["anomalies"] = [{"anomaly": "phantom-read", "tag": ""}, {"anomaly": "phantom-read", "tag": ""}]
    assert cell(r, kp) == "silent · phantom-read x2 != -"
    r.truths["kafka-python"].anomalies.append(Anomaly("phantom-read", "events", 0, 25, 6))
    assert cell(r, kp) == "silent · phantom-read x2"  # the server split it into two served batches: agreed
    server["anomalies"].append({"anomaly": "lost-ack", "tag": "expected"})
    r.truths["kafka-python"].anomalies.append(Anomaly("lost-ack", "input", 0, 3))
    assert cell(r, kp) == "silent · lost-ack/expected, phantom-read x2 != lost-ack, phantom-read"
    ck = client("confluent-kafka")
    dup = producing(["duplicate"], "duplicate")
    dup.server_report["clients"][0]["anomalies"] = [{"anomaly": "duplicate-write", "tag": ""}]
    dup.truths["confluent-kafka"].anomalies.append(Anomaly("duplicate-write", "input", 0, 7))
    assert producer_cell(dup, ck) == "duplicate · duplicate-write"


def test_docs_rows_merge_with_the_last_run_and_land_between_the_markers(tmp_path: Path) -> None:
    from epochguard.wire.drivers.compat import DOC_END, DOC_START, write_docs

    kp, kcat = client("kafka-python"), client("kcat")
    page = tmp_path / "serve.md"
    page.write_text(f"intro\n{DOC_START}\nold table\n{DOC_END}\nafter\n", encoding="utf-8")
    write_docs({("zombie-leader", "served"): result(["silent"], ["silent"]),
                ("unclean-election", "caught-up"): "run failed: boom"}, [kp, kcat], tmp_path, seed=3)
    # a second run of one row and one client: the other rows, and the other client's cell, stay
    write_docs({("unclean-election", "served"): result(["reset"], ["reset"])}, [kp], tmp_path, seed=3)
    write_docs({("zombie-leader", "served"): result(["detected"], ["silent"])}, [kp], tmp_path, seed=3)
    text = page.read_text(encoding="utf-8")
    assert text.startswith("intro\n") and text.endswith(f"{DOC_END}\nafter\n") and "old table" not in text
    rows = [line for line in text.splitlines() if line.startswith("| ")]
    assert rows == [
        "| scenario | trigger | kafka-python 3.0.12 | kcat |",
        "| unclean-election | served | reset | not run |",
        "| unclean-election | caught-up | run failed: boom | run failed: boom |",
        "| zombie-leader | served | detected != silent | not seen |",
    ]
    # a run kafka-python sat out (no version reported) keeps the label an earlier run gave it
    write_docs({("zombie-leader", "caught-up"): "run failed: boom"}, [kp], tmp_path, seed=3)
    assert page.read_text(encoding="utf-8").count("| kafka-python 3.0.12 |") == 1
    write_docs({("zombie-leader", "caught-up"): result(["reset"], ["reset"])}, [kp], tmp_path, seed=3)
    data = json.loads((tmp_path / "compat.json").read_text(encoding="utf-8"))
    assert data["seed"] == 3 and data["labels"] == {"kafka-python": "kafka-python 3.0.12", "kcat": "kcat"}
    assert [(r["scenario"], r["trigger"]) for r in data["rows"]] == [
        ("unclean-election", "served"), ("unclean-election", "caught-up"), ("zombie-leader", "served"),
        ("zombie-leader", "caught-up")]
    (tmp_path / "serve.md").write_text("no markers\n", encoding="utf-8")
    before = (tmp_path / "compat.json").read_text(encoding="utf-8")
    with pytest.raises(ValueError, match="compat:start"):
        write_docs({("clean", "served"): result([], [])}, [kp], tmp_path, seed=1)
    assert (tmp_path / "compat.json").read_text(encoding="utf-8") == before  # nothing half-written


def test_follower_fetch_lag_runs_clients_with_a_rack_and_notes_where_they_went(monkeypatch, tmp_path) -> None:
    from epochguard.wire.drivers import compat

    assert {c.name for c in CLIENTS if c.rack is None} == {"kafka-go"}  # its reader has no client rack
    assert client("confluent-kafka").rack_args("rack-2") == ("--option", "client.rack=rack-2")
    assert client("kafka-go").rack_args("rack-2") == ()
    started: dict[str, tuple] = {}

    def fake_run(command, group, run_dir, driver_args=None, **_kw):
        started.update({c.name: tuple(driver_args[c.name]) for c in group})
        return "run failed: not run here"

    monkeypatch.setattr(compat, "run_clients", fake_run)
    compat.run_matrix([("follower-fetch-lag", "served")], [client("kcat"), client("kafka-go"), client("franz-go")],
                      tmp_path)
    assert started == {"kcat": ("--option", "client.rack=rack-2"), "franz-go": ("--option", "rack=rack-2")}
    kp = client("kafka-python")
    run = result([], [])
    run.server_report["clients"][0]["follower_out_of_range"] = [{"how": "leader"}, {"how": "leader"}]
    assert cell(run, kp) == "- (follower/leader x2)"
    run.server_report["clients"][0]["follower_out_of_range"] = [{"how": "reset"}]
    assert cell(run, kp) == "- (follower/reset)"
    table = format_table({("follower-fetch-lag", "served"): run}, [kp, client("kafka-go")]).splitlines()
    assert table[2] == "| follower-fetch-lag | served | - (follower/reset) | n/a |"  # kafka-go sat out


def test_transactional_scenarios_run_read_committed_consumers_and_mark_a_lost_marker(monkeypatch, tmp_path) -> None:
    from epochguard.wire.anomalies import Anomaly
    from epochguard.wire.drivers import compat

    assert serve_runs(["transactions", "marker-truncated"], TRIGGERS) == [
        ("transactions", "served"), ("marker-truncated", "served"), ("marker-truncated", "caught-up")]
    assert serve_runs(["transactions"], ["caught-up"]) == []  # it has no fault to trigger
    started: dict[str, tuple] = {}
    committed: list[bool] = []

    def fake_run(command, group, run_dir, driver_args=None, read_committed=False, **_kw):
        started.update({c.name: tuple(driver_args[c.name]) for c in group})
        committed.append(read_committed)
        return "run failed: not run here"

    monkeypatch.setattr(compat, "run_clients", fake_run)
    compat.run_matrix([("transactions", "served")], [client("kcat"), client("aiokafka"), client("sarama")], tmp_path)
    # each client's own name for isolation.level; the truth is told the consumers read committed
    assert started == {"kcat": ("--option", "isolation.level=read_committed"),
                       "aiokafka": ("--option", "isolation_level=read_committed"),
                       "sarama": ("--option", "isolation.level=read_committed")}
    assert committed == [True, True]
    kp = client("kafka-python")
    # a divergence of a transaction marker only: no record it consumed was replaced; the log saw the re-read
    r = result(["reset"], [], how=("back", ""))
    server = r.server_report["clients"][0]
    server["divergences"][0]["marker"] = True
    r.truths["kafka-python"].rewinds.append(("events", 0, 0, 40))
    server["anomalies"] = [{"anomaly": "aborted-read", "tag": ""}, {"anomaly": "rewind", "tag": ""}]
    r.truths["kafka-python"].anomalies.append(Anomaly("rewind", "events", 0, 0, 40))
    assert cell(r, kp) == "reset/back‡ · aborted-read‡, rewind"
    # not a marker: the same is a disagreement on both counts
    server["divergences"][0]["marker"] = False
    assert cell(r, kp) == "reset/back != false-alarm · aborted-read, rewind != rewind"
    # an aborted read only the delivery log saw (a client not filtering aborted transactions) stays one
    r.truths["kafka-python"].anomalies.append(Anomaly("aborted-read", "events", 0, 7))
    server["anomalies"] = [{"anomaly": "rewind", "tag": ""}]
    assert cell(r, kp).endswith(" · rewind != aborted-read, rewind")
    r.truths["kafka-python"].markers_read = 3
    assert "(markers read x3)" in cell(r, kp)


def test_handoff_runs_once_with_the_commit_trigger_and_says_who_cannot(monkeypatch, tmp_path) -> None:
    from epochguard.wire.drivers import compat

    assert serve_runs(["handoff-truncation"], TRIGGERS) == [("handoff-truncation", "commit")]
    assert {c.name for c in CLIENTS if not c.group} == {"java-consumer"}  # KIP-848 only: n/a
    ran: list[list[str]] = []

    def fake_handoff(command, group, run_dir, **_kw):
        ran.append([c.name for c in group])
        assert command[command.index("--trigger") + 1] == "commit"
        return "run failed: not run here"

    monkeypatch.setattr(compat, "run_handoff", fake_handoff)
    compat.run_matrix([("handoff-truncation", "commit")], [client("kcat"), client("java-consumer")], tmp_path)
    assert ran == [["kcat"]]
    r = result(["silent"], ["silent"])
    assert format_table({("handoff-truncation", "commit"): r}, [client("kafka-python"), client("java-consumer")]
                        ).splitlines()[2] == "| handoff-truncation | commit | silent | n/a |"


def test_the_kafka_comparison_shows_both_sides_anomalies_and_marks_what_differs() -> None:
    """`compat --cluster kafka`: each cell `serve / kafka` by the delivery logs; `≠` where the verdicts
    differ (counted against agreement), `≈` where only the anomalies' names do (not counted)."""
    from epochguard.wire.anomalies import Anomaly
    from epochguard.wire.drivers.compat import format_comparison, truth_cell

    kp = client("kafka-python")
    key = ("unclean-election", "served")

    def run(verdict: str, *anomalies: Anomaly) -> RunResult:
        r = result([verdict], [verdict])
        r.truths["kafka-python"].anomalies.extend(anomalies)
        return r

    phantom = Anomaly("phantom-read", "events", 0, 25, 5)
    lost = Anomaly("lost-ack", "events", 0, 30, 2, tag="expected")
    assert truth_cell(run("detected", phantom, lost), kp) == "detected · lost-ack/expected, phantom-read"
    assert truth_cell(run("detected"), kp) == "detected"
    table, agree, cells = format_comparison({key: run("detected", phantom)}, {key: run("detected", phantom)}, [kp])
    assert (agree, cells) == (1, 1) and "| detected · phantom-read / detected · phantom-read |" in table
    table, agree, _ = format_comparison({key: run("detected", phantom)}, {key: run("detected", phantom, lost)}, [kp])
    assert agree == 1 and "| **≈** detected · phantom-read / detected · lost-ack/expected, phantom-read |" in table
    table, agree, _ = format_comparison({key: run("silent", phantom)}, {key: run("detected", phantom)}, [kp])
    assert agree == 0 and "| **≠** silent · phantom-read / detected · phantom-read |" in table


def test_stale_hints_are_a_note_and_hint_regress_is_the_judges_check() -> None:
    """The cell names what a client did with each stale hint; `hint-regress` only where the judge's check says
    so (a followed regressing hint to a broker that did not lead), not for every followed one."""
    kp = client("kafka-python")
    run = result([], [])
    followed = {"topic": "input", "partition": 0, "api": "Produce", "step": 9, "how": "followed", "regress": True,
                "hint": [3, 0], "leader": [2, 1]}
    newer = {**followed, "api": "Fetch", "regress": False, "hint": [3, 1]}
    asked = {**followed, "step": 12, "how": "metadata"}
    server = run.server_report["clients"][0]
    server.update(leader_hints=[followed, newer, asked], hint_regress=[dict(followed)])
    assert cell(run, kp) == "- (hint-regress, hint/followed, hint/metadata)"
    server.update(leader_hints=[asked, asked], hint_regress=[])
    assert cell(run, kp) == "- (hint/metadata x2)"
    assert ("stale-leader-hint", "caught-up") in serve_runs(["stale-leader-hint"], TRIGGERS)  # both triggers
