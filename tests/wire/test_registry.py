"""A missing real client skips with what to install, and fails under CI (CI=true), never skips there."""

from __future__ import annotations

import pytest

from epochguard.wire.drivers.registry import CLIENTS, Client, client
from tests.wire.conftest import require

ABSENT = Client("absent", "epochguard.wire.drivers.absent", "absent-client>=1", importable="no_such_module_xyz")
NO_EXE = Client("absent-exe", "epochguard.wire.drivers.absent", "absent-exe", executable="no-such-program-xyz")


def test_missing_names_what_to_install() -> None:
    assert "pip install 'absent-client>=1'" in (ABSENT.missing() or "")
    assert "apt-get install no-such-program-xyz" in (NO_EXE.missing() or "")


@pytest.mark.parametrize("ci", ["", "false"])
def test_a_missing_client_skips_outside_ci(monkeypatch: pytest.MonkeyPatch, ci: str) -> None:
    monkeypatch.setenv("CI", ci)
    with pytest.raises(pytest.skip.Exception, match="absent"):
        require(ABSENT)


@pytest.mark.parametrize("ci", ["true", "1"])
def test_a_missing_client_fails_under_ci(monkeypatch: pytest.MonkeyPatch, ci: str) -> None:
    monkeypatch.setenv("CI", ci)
    with pytest.raises(pytest.fail.Exception, match="absent"):
        require(NO_EXE if ci == "1" else ABSENT)


def test_every_client_has_its_id_and_driver_module() -> None:
    import importlib.util

    assert [c.name for c in CLIENTS] == ["confluent-kafka", "kafka-python", "aiokafka", "kcat", "java-classic",
                                         "java-consumer", "franz-go", "sarama", "kafka-go", "epochguard",
                                         "epochguard-asyncio"]
    for c in CLIENTS:
        assert c.client_id == f"epochguard-{c.name}"
        assert importlib.util.find_spec(c.module) is not None
    with pytest.raises(ValueError, match="unknown client"):
        client("java")
    assert client("java-consumer").args == ("--variant", "consumer")
    assert client("sarama").args == ("--client", "sarama") and client("sarama").toolchain == "go"
