"""`epoch-flap` (issue 20; librdkafka#4425, #4261): leadership moves 1 -> 2 -> 3 -> 1 within 40 ms, clean
elections, so a client's validation meets a leader already fenced by the next epoch. Nothing is
truncated: every client keeps consuming (no stall on either side), asks at a sane rate (no storm), and
re-reads and skips nothing, and its delivery log and the server agree.

One serve run (`--trigger served`, the producers writing throughout) with the Python-driven clients;
`epochguard compat` runs every client under both triggers.
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
    yield python_clients_run(tmp_path_factory, "epoch-flap", "served")


@pytest.mark.parametrize("name", [c.name for c in PY_CLIENTS])
def test_every_client_keeps_consuming_through_the_flap(run: RunResult, name: str) -> None:
    truth, server = undiverged(run, name)
    assert server["stalls"] == [] and truth.stalls == [], (server["stalls"], truth.stalls, run.why(name))
    assert server["storms"] == [], server["storms"]
    assert truth.reread == 0 and truth.skipped == 0 and truth.rewinds == []
    assert truth.lost_acked == [] and truth.duplicated_produced == [] and server["acks_lost"] == []
