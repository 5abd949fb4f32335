"""`epochguard recover`'s face: TLS and SASL flags become the client's settings (the same flags as `watch`),
settings that do not fit together are refused before anything connects, and the library passes them to
every client it makes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import epochguard.client
from epochguard.__main__ import build_parser, main
from epochguard.ops.cli import client_settings
from epochguard.ops.recover import recover


def test_the_security_flags_are_the_clients_settings() -> None:
    args = build_parser("recover").parse_args([
        "recover", "audit/", "--bootstrap-server", "k:9093", "--security-protocol", "SASL_SSL",
        "--sasl-mechanism", "SCRAM-SHA-512", "--sasl-username", "ops", "--sasl-password", "s3cret",
        "--ssl-cafile", "/etc/kafka/ca.pem"])
    assert client_settings(args) == {"security_protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-512",
                                     "sasl_plain_username": "ops", "sasl_plain_password": "s3cret",
                                     "ssl_cafile": "/etc/kafka/ca.pem"}
    plain = build_parser("recover").parse_args(["recover", "audit/", "--bootstrap-server", "k:9092"])
    assert client_settings(plain) == {"security_protocol": "PLAINTEXT"}


def test_sasl_without_a_user_is_refused_before_connecting(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["recover", str(tmp_path), "--bootstrap-server", "127.0.0.1:1", "--security-protocol",
                 "SASL_PLAINTEXT"])
    assert code == 2
    assert "sasl_plain_username" in capsys.readouterr().err
    missing = main(["recover", str(tmp_path), "--bootstrap-server", "127.0.0.1:1", "--security-protocol", "SSL",
                    "--ssl-cafile", str(tmp_path / "nope.pem")])
    assert missing == 2 and "nope.pem" in capsys.readouterr().err


def test_the_library_hands_the_settings_to_every_client(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pq.write_table(pa.Table.from_pylist([{
        "topic": "t", "partition": 0, "broker": 1, "offset": 5, "leader_epoch": 2, "timestamp": 0, "timestamp_type": 0,
        "key": b"k", "value": b"v", "headers": [], "is_control": False, "kind": "lost"}]),
        tmp_path / "lost_records.parquet")
    made: list[dict[str, Any]] = []

    class Refused(Exception):
        pass

    def client(**configs: Any) -> Any:
        made.append(configs)
        raise Refused

    monkeypatch.setattr(epochguard.client, "KafkaConsumer", client)
    monkeypatch.setattr(epochguard.client, "KafkaProducer", client)
    settings = {"security_protocol": "SASL_SSL", "sasl_mechanism": "PLAIN", "sasl_plain_username": "u",
                "sasl_plain_password": "p"}
    with pytest.raises(Refused):
        recover(str(tmp_path), "k:9093", client=settings)  # the producer first
    with pytest.raises(Refused):
        recover(str(tmp_path), "k:9093", client=settings, dry_run=True)  # then the dedupe read's consumer
    assert [{k: c[k] for k in settings} for c in made] == [settings, settings]
