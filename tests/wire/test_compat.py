"""The compatibility table's cells: the server's verdicts, and both sides when the delivery log disagrees."""

from __future__ import annotations

from epochguard.wire.drivers.compat import cell, format_table
from epochguard.wire.drivers.registry import client
from epochguard.wire.drivers.session import RunResult
from epochguard.wire.drivers.truth import ClientTruth, Divergence, FinalLog

EMPTY = FinalLog({}, {}, {})


def result(server: list[str] | None, truth: list[str], software: str = "kafka-python 3.0.12") -> RunResult:
    divs = [Divergence("events", 0, 25, 30, 6, v, 31) for v in truth]
    clients = [] if server is None else [{
        "client_id": "epochguard-kafka-python", "software": software,
        "divergences": [{"topic": "events", "partition": 0, "offset": 25, "verdict": v} for v in server],
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


def test_table_rows_and_labels() -> None:
    kp = client("kafka-python")
    table = format_table({("unclean-election", "served"): result(["reset"], ["reset"]),
                          ("zombie-leader", "served"): "run failed: boom"}, [kp])
    lines = table.splitlines()
    assert lines[0] == "| scenario | trigger | kafka-python 3.0.12 |"
    assert lines[2] == "| unclean-election | served | reset |"
    assert lines[3] == "| zombie-leader | served | run failed: boom |"
