"""`false-divergence`, a control (issue 20; redpanda#5435): nothing is truncated, yet after a clean leader
change the new leader answers each client's first OffsetsForLeaderEpoch 5 offsets short. No client may be
given a divergence verdict; a client that went back on the answer is a false alarm on the server's side
and a rewind in its own delivery log, and the two sides must agree on who did.

One serve run (`--trigger caught-up`: the producers pause while the consumers catch up, so every consumer
sits at the end the answer undercuts) with the Python-driven clients; `epochguard compat` runs every
client under both triggers.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from epochguard.wire.drivers.session import RunResult
from tests.wire.conftest import require_final_reader
from tests.wire.serving import NEEDS_SERVE, PY_CLIENTS, python_clients_run, undiverged

pytestmark = NEEDS_SERVE


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunResult]:
    require_final_reader()
    yield python_clients_run(tmp_path_factory, "false-divergence", "caught-up")


@pytest.mark.parametrize("name", [c.name for c in PY_CLIENTS])
def test_no_client_is_given_a_divergence_it_did_not_meet(run: RunResult, name: str) -> None:
    truth, server = undiverged(run, name)
    assert truth.duplicated_produced == []
    # who went back: the server saw a fetch below the end after the short answer; the log a re-read
    assert bool(server["false_alarms"]) == bool(truth.rewinds), (
        f"{name}: server false alarms {server['false_alarms']}, delivery-log rewinds {truth.rewinds}")


def test_epochguard_client_trusts_the_answer_as_kafka_clients_do(run: RunResult) -> None:
    """It validates after every leader change and cannot tell the short answer from a truncation: it goes
    back to the answer, as Java's SubscriptionState.maybeCompleteValidation does, and re-reads 5 records."""
    for name in ("epochguard", "epochguard-asyncio"):
        server = run.server_client(f"epochguard-{name}")
        assert server is not None
        assert [a["served_end"] - a["answer"] for a in server["false_alarms"]] == [5], server["false_alarms"]
        assert [r[3] for r in run.truths[name].rewinds] == [5], run.truths[name].rewinds
