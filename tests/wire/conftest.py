"""Real clients for the wire tests: skip when one is missing, except under CI, where it fails."""

from __future__ import annotations

import os

import pytest

from epochguard.wire.drivers.registry import Client
from epochguard.wire.drivers.toolchain import ToolchainError


def under_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("true", "1")


def require(client: Client) -> None:
    """Skip (fail under CI=true: CI must never skip a real client silently) when `client` is missing or its
    driver cannot be built here."""
    missing = client.missing()
    if missing is None:
        try:
            client.prepare()  # the Java and Go drivers' build, cached: nothing once built
            return
        except ToolchainError as exc:
            missing = str(exc)
    if under_ci():
        pytest.fail(f"{client.name}: {missing}; `make test` installs it", pytrace=False)
    pytest.skip(f"{client.name}: {missing}")


def usable(client: Client) -> bool:
    """Whether `client` can run here (installed, its driver built)."""
    if client.missing() is not None:
        return False
    try:
        client.prepare()
    except ToolchainError:
        return False
    return True


def require_final_reader() -> None:
    """The final log is read with confluent-kafka: without it no run can be judged."""
    from epochguard.wire.drivers.registry import client

    require(client("confluent-kafka"))
