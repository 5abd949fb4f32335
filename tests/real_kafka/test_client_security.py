"""epochguard's client over TLS and SASL against a real Apache Kafka 4.4 broker (issue 19).

One KRaft cluster for the module (a controller and one broker; about the start cost of one JVM pair)
whose broker has, next to its PLAINTEXT listener (inter-broker and admin), an SSL listener, a
SASL_PLAINTEXT listener enabling PLAIN only, and a SASL_SSL listener enabling SCRAM-SHA-256 and
SCRAM-SHA-512. The TLS material is made here with openssl (a self-signed CA and a broker certificate
for 127.0.0.1, in a PKCS12 keystore), the SCRAM credentials are written at format time
(`kafka-storage format --add-scram`). Each protocol carries a produce / group-consume / commit round
trip (acks=all, the records read are the records produced, the commit comes back with its leader
epoch); a wrong password, an unsupported mechanism and an untrusted certificate give their typed
errors within seconds, from the consumer's poll and the producer's future. Without Kafka's jars, Java
17 or openssl the tests skip naming what is missing (under CI=true they fail).
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from epochguard.client import AsyncConsumer, AsyncProducer, KafkaConsumer, KafkaProducer
from epochguard.errors import SaslAuthenticationError, SslAuthenticationError, UnsupportedSaslMechanismError
from epochguard.kafka import KafkaCluster
from epochguard.types import OffsetAndMetadata, TopicPartition

from .conftest import _require_kafka, under_ci

pytestmark = [pytest.mark.kafka, pytest.mark.no_mutants]

PASSWORD = "changeit"
USERS = {"alice": "alice-secret", "bob": "bob-secret"}
_JAAS_PLAIN = ("org.apache.kafka.common.security.plain.PlainLoginModule required "
               + " ".join(f'user_{u}="{p}"' for u, p in USERS.items()) + ";")
_JAAS_SCRAM = "org.apache.kafka.common.security.scram.ScramLoginModule required;"
_START: dict[str, float] = {}


def _openssl(*args: str, cwd: Path) -> None:
    out = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True, timeout=60)
    if out.returncode != 0:
        raise RuntimeError(f"openssl {' '.join(args)} failed: {out.stderr}")


def make_tls(dest: Path) -> dict[str, Path]:
    """A CA and a broker certificate for 127.0.0.1/localhost (2 days), the broker's PKCS12 keystore, and a
    second CA nobody signed with (for the untrusted case)."""
    dest.mkdir(parents=True, exist_ok=True)
    (dest / "san.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    for ca in ("ca", "other-ca"):
        _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{ca}.key", "-out", f"{ca}.pem",
                 "-days", "2", "-subj", f"/CN=epochguard test {ca}", cwd=dest)
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "broker.key", "-out", "broker.csr",
             "-subj", "/CN=localhost", cwd=dest)
    _openssl("x509", "-req", "-in", "broker.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
             "-out", "broker.pem", "-days", "2", "-extfile", "san.ext", cwd=dest)
    _openssl("pkcs12", "-export", "-in", "broker.pem", "-inkey", "broker.key", "-out", "broker.p12",
             "-passout", f"pass:{PASSWORD}", "-name", "broker", cwd=dest)
    return {"ca": dest / "ca.pem", "other_ca": dest / "other-ca.pem", "keystore": dest / "broker.p12"}


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[KafkaCluster, dict[str, Path]]]:
    _require_kafka()
    if shutil.which("openssl") is None:
        if under_ci():
            pytest.fail("openssl (the TLS material of the TLS/SASL tests) is missing", pytrace=False)
        pytest.skip("openssl (the TLS material of the TLS/SASL tests) is missing")
    tls = make_tls(tmp_path_factory.mktemp("tls"))
    overrides = {
        "ssl.keystore.type": "PKCS12",
        "ssl.keystore.location": str(tls["keystore"]),
        "ssl.keystore.password": PASSWORD,
        "ssl.key.password": PASSWORD,
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        "listener.name.sasl_plaintext.sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": _JAAS_PLAIN,
        "listener.name.sasl_ssl.sasl.enabled.mechanisms": "SCRAM-SHA-256,SCRAM-SHA-512",
        "listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config": _JAAS_SCRAM,
        "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": _JAAS_SCRAM,
    }
    scram = [f"{m}=[name={u},password={p}]" for m in ("SCRAM-SHA-256", "SCRAM-SHA-512") for u, p in USERS.items()]
    base = Path(__file__).parents[2] / "target" / "real-kafka" / "secure"
    shutil.rmtree(base, ignore_errors=True)
    cluster = KafkaCluster(base, brokers=1, broker_overrides=overrides, scram=scram,
                           listeners={"SSL": "SSL", "SASL_PLAINTEXT": "SASL_PLAINTEXT", "SASL_SSL": "SASL_SSL"})
    t0 = time.monotonic()
    try:
        cluster.start()
        _START["start_s"] = time.monotonic() - t0
        yield cluster, tls
    finally:
        cluster.close()


def settings(cluster: KafkaCluster, tls: dict[str, Path], listener: str, mechanism: str | None = None,
             user: str = "alice", password: str | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"bootstrap_servers": cluster.listener_bootstrap(listener), "security_protocol": listener,
                           "request_timeout_ms": 15_000}
    if "SSL" in listener:
        out["ssl_cafile"] = str(tls["ca"])
    if mechanism is not None:
        out |= {"sasl_mechanism": mechanism, "sasl_plain_username": user,
                "sasl_plain_password": USERS[user] if password is None else password}
    return out


CASES = [("SSL", None), ("SASL_PLAINTEXT", "PLAIN"), ("SASL_SSL", "SCRAM-SHA-256"), ("SASL_SSL", "SCRAM-SHA-512")]


@pytest.mark.parametrize(("listener", "mechanism"), CASES, ids=[f"{lst}-{m}" for lst, m in CASES])
def test_produce_and_group_consume_round_trip(secure: tuple[KafkaCluster, dict[str, Path]], listener: str,
                                              mechanism: str | None) -> None:
    cluster, tls = secure
    topic = f"secure-{listener}-{mechanism}".lower()
    cluster.create_topic(topic, {0: [1]})
    common = settings(cluster, tls, listener, mechanism)
    producer = KafkaProducer(acks="all", linger_ms=1, **common)
    try:
        futures = [producer.send(topic, key=b"k%d" % i, value=b"v%03d" % i) for i in range(50)]
        producer.flush(30)
        produced = [(f.get(0).offset, b"v%03d" % i, f.get(0).leader_epoch) for i, f in enumerate(futures)]
    finally:
        producer.close()
    assert produced == [(i, b"v%03d" % i, 0) for i in range(50)]
    consumer = KafkaConsumer(group_id=f"g-{topic}", auto_offset_reset="earliest", enable_auto_commit=False,
                             client_id=f"eg-{topic}", **common)
    try:
        consumer.subscribe([topic])
        got: list[tuple[int, bytes | None, int | None]] = []
        end = time.monotonic() + 60
        while len(got) < 50 and time.monotonic() < end:
            for records in consumer.poll(timeout_ms=200).values():
                got += [(r.offset, r.value, r.leader_epoch) for r in records]
        assert got == produced
        consumer.commit()
        assert consumer.committed(TopicPartition(topic, 0)) == OffsetAndMetadata(50, "", 0)
    finally:
        consumer.close(autocommit=False)


def test_asyncio_round_trip_over_sasl_ssl_scram_sha_512(secure: tuple[KafkaCluster, dict[str, Path]]) -> None:
    cluster, tls = secure
    topic = "secure-async"
    cluster.create_topic(topic, {0: [1]})
    common = settings(cluster, tls, "SASL_SSL", "SCRAM-SHA-512", user="bob")

    async def main() -> list[tuple[int, bytes | None]]:
        async with AsyncProducer(acks="all", **common) as producer:
            deliveries = [await producer.send(topic, value=b"a%d" % i) for i in range(10)]
            await producer.flush(30)
            assert [d.metadata.offset for d in deliveries if d.metadata] == list(range(10))
        got: list[tuple[int, bytes | None]] = []
        async with AsyncConsumer(group_id="g-async", auto_offset_reset="earliest", enable_auto_commit=False,
                                 **common) as consumer:
            await consumer.subscribe([topic])
            while len(got) < 10:
                for records in (await consumer.poll(timeout_ms=200)).values():
                    got += [(r.offset, r.value) for r in records]
            await consumer.commit()
            assert await consumer.committed(TopicPartition(topic, 0)) == OffsetAndMetadata(10, "", 0)
        return got

    assert asyncio.run(asyncio.wait_for(main(), 90)) == [(i, b"a%d" % i) for i in range(10)]


@pytest.mark.parametrize(("listener", "mechanism", "says"), [
    ("SASL_PLAINTEXT", "PLAIN", "Invalid username or password"),
    ("SASL_SSL", "SCRAM-SHA-256", "invalid credentials with SASL mechanism SCRAM-SHA-256"),
])
def test_a_wrong_password_is_a_typed_error_without_a_hang(secure: tuple[KafkaCluster, dict[str, Path]],
                                                          listener: str, mechanism: str, says: str) -> None:
    cluster, tls = secure
    common = settings(cluster, tls, listener, mechanism, password="not-the-password")
    consumer = KafkaConsumer(group_id="g-wrong", **common)
    try:
        consumer.subscribe(["secure-never"])
        t0 = time.monotonic()
        with pytest.raises(SaslAuthenticationError) as err:
            consumer.poll(timeout_ms=30_000)
        assert time.monotonic() - t0 < 10
        assert err.value.mechanism == mechanism and mechanism in str(err.value) and says in str(err.value)
        assert "not-the-password" not in str(err.value)
    finally:
        consumer.close(autocommit=False)
    producer = KafkaProducer(**common)
    try:
        t0 = time.monotonic()
        with pytest.raises(SaslAuthenticationError, match=says):
            producer.send("secure-never", value=b"x").get(30)
        assert time.monotonic() - t0 < 10
    finally:
        producer.close(0)


def test_an_unsupported_mechanism_names_what_the_listener_offers(
        secure: tuple[KafkaCluster, dict[str, Path]]) -> None:
    cluster, tls = secure
    consumer = KafkaConsumer(**settings(cluster, tls, "SASL_PLAINTEXT", "SCRAM-SHA-256"))
    try:
        consumer.assign([TopicPartition("secure-never", 0)])
        with pytest.raises(UnsupportedSaslMechanismError) as err:
            consumer.poll(timeout_ms=30_000)
        assert err.value.enabled_mechanisms == ("PLAIN",)
        assert "it offers: PLAIN" in str(err.value)
    finally:
        consumer.close(autocommit=False)


def test_an_untrusted_certificate_is_an_ssl_authentication_error(
        secure: tuple[KafkaCluster, dict[str, Path]]) -> None:
    cluster, tls = secure
    common = settings(cluster, tls, "SSL") | {"ssl_cafile": str(tls["other_ca"])}
    consumer = KafkaConsumer(**common)
    try:
        consumer.assign([TopicPartition("secure-never", 0)])
        t0 = time.monotonic()
        with pytest.raises(SslAuthenticationError, match="certificate verify failed"):
            consumer.poll(timeout_ms=30_000)
        assert time.monotonic() - t0 < 10
    finally:
        consumer.close(autocommit=False)
    # TLS spoken to the PLAINTEXT listener: the broker closes the connection mid-handshake, which Kafka's
    # clients retry as a disconnect ("terminated during authentication"); the error says what it may be
    plain = KafkaConsumer(bootstrap_servers=cluster.bootstrap, security_protocol="SSL", ssl_cafile=str(tls["ca"]),
                          request_timeout_ms=5_000)
    try:
        plain.assign([TopicPartition("secure-never", 0)])
        assert plain.poll(timeout_ms=1_000) == {}
        assert "during the TLS handshake (is it a TLS listener?)" in str(plain.last_error)
    finally:
        plain.close(autocommit=False)
