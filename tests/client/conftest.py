"""Fixtures of the client tests: one `epochguard serve clean` per module that asks for it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.wire.serving import Served


@pytest.fixture(scope="module")
def served() -> Iterator[Served]:
    """A clean simulated cluster on the real wire, for the module's tests to share."""
    server = Served("clean")
    try:
        yield server
    finally:
        server.stop()
