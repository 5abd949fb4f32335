"""TLS and SASL of `epochguard.client` without a cluster: the SCRAM exchange against RFC 7677's test
vector and against hostile broker messages (each a typed `SaslAuthenticationError`, at once), the SASL
frames against kafka-python's encoding, the settings, and the SASL handshake of `network` against tiny
brokers in the test (PLAIN accepted, refused, an unsupported mechanism, a broker without SASL, a SCRAM
broker asking for an unbounded PBKDF2). tests/real_kafka/test_client_security.py runs them against
Kafka 4.4's own listeners."""

from __future__ import annotations

import asyncio
import base64
import ssl
import struct
import time
from collections.abc import Awaitable, Callable

import pytest

from epochguard import _core
from epochguard.client.kafka_consumer import consumer_config
from epochguard.client.kafka_producer import producer_config
from epochguard.client.network import NetworkClient
from epochguard.client.security import SCRAM_MAX_ITERATIONS, PlainClient, ScramClient, Security
from epochguard.errors import (
    AuthenticationError,
    Errors,
    IllegalSaslStateError,
    KafkaConnectionError,
    SaslAuthenticationError,
    SslAuthenticationError,
    UnsupportedSaslMechanismError,
)
from epochguard.protocol.api_versions import BROKER_API_VERSIONS, ApiKey, ApiVersionsRequest, answer_api_versions
from epochguard.protocol.messages import (
    MetadataRequest,
    MetadataResponse,
    MetadataResponseBroker,
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)

ksasl = pytest.importorskip("kafka.protocol.sasl", reason="kafka-python (the dev extra) is missing")

# RFC 7677 section 3
RFC_NONCE = "rOprNGfwEbeRWgbNEkqO"
RFC_SERVER_FIRST = b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
RFC_CLIENT_FINAL = (b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                    b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
RFC_SERVER_FINAL = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="


def rfc_client() -> ScramClient:
    return ScramClient("SCRAM-SHA-256", "user", "pencil", nonce=RFC_NONCE)


# --- SCRAM -----------------------------------------------------------------------------------------
def test_scram_sha_256_is_rfc_7677s_exchange() -> None:
    client = rfc_client()
    assert client.first() == b"n,,n=user,r=" + RFC_NONCE.encode()
    assert client.respond(RFC_SERVER_FIRST) == RFC_CLIENT_FINAL
    assert not client.complete
    assert client.respond(RFC_SERVER_FINAL) is None
    assert client.complete


def test_scram_user_names_are_escaped_and_nonces_random() -> None:
    a = ScramClient("SCRAM-SHA-512", "a=b,c", "pw")
    b = ScramClient("SCRAM-SHA-512", "a=b,c", "pw")
    first_a, first_b = a.first(), b.first()
    assert first_a.startswith(b"n,,n=a=3Db=2Cc,r=")
    assert first_a != first_b and len(first_a) - len(b"n,,n=a=3Db=2Cc,r=") >= 24


def test_scram_sha_512_proof_and_server_signature() -> None:
    """SHA-512 computed independently with hashlib/hmac (RFC 5802's formulas) for a fixed exchange."""
    import hashlib
    import hmac

    client = ScramClient("SCRAM-SHA-512", "alice", "alice-secret", nonce="abc")
    client.first()
    salt = b"0123456789abcdef"
    server_first = b"r=abcXYZ,s=" + base64.b64encode(salt) + b",i=4096"
    final = client.respond(server_first)
    assert final is not None
    salted = hashlib.pbkdf2_hmac("sha512", b"alice-secret", salt, 4096)
    client_key = hmac.new(salted, b"Client Key", "sha512").digest()
    auth = b"n=alice,r=abc," + server_first + b",c=biws,r=abcXYZ"
    signature = hmac.new(hashlib.sha512(client_key).digest(), auth, "sha512").digest()
    proof = bytes(x ^ y for x, y in zip(client_key, signature, strict=True))
    assert final == b"c=biws,r=abcXYZ,p=" + base64.b64encode(proof)
    server = hmac.new(hmac.new(salted, b"Server Key", "sha512").digest(), auth, "sha512").digest()
    assert client.respond(b"v=" + base64.b64encode(server)) is None and client.complete


@pytest.mark.parametrize(("server_first", "why"), [
    (b"r=XXXXrOprNGfwEbeRWgbNEkqO%hv,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096", "does not extend the client nonce"),
    (b"r=rOprNGfwEbeRWgbNEkqO,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096", "does not extend the client nonce"),
    (b"r=rOprNGfwEbeRWgbNEkqO%hv,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=0", "iteration count 0 outside [4096, 16384]"),
    (b"r=rOprNGfwEbeRWgbNEkqO%hv,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4095", "iteration count 4095 outside"),
    (b"r=rOprNGfwEbeRWgbNEkqO%hv,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=16385", "iteration count 16385 outside"),
    (b"r=rOprNGfwEbeRWgbNEkqO%hv,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=1000000000000", "iteration count 1000000000000"),
    (b"r=rOprNGfwEbeRWgbNEkqO%hv,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=-5", "iteration count -5 outside"),
    (b"r=rOprNGfwEbeRWgbNEkqO%hv,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=many", "count that is not a number"),
    (b"r=rOprNGfwEbeRWgbNEkqO%hv,s=not*base64,i=4096", "salt that is not base64"),
    (b"r=rOprNGfwEbeRWgbNEkqO%hv,s=c2Fsd*A==,i=4096", "salt that is not base64"),  # strict: no character skipped
    (b"r=rOprNGfwEbeRWgbNEkqO%hv,ss=c2FsdA==,i=4096", "malformed attribute 'ss=c2FsdA=='"),
    (b"r=rOprNGfwEbeRWgbNEkqO%hv,i=4096", "without r=, s= or i="),
    (b"e=unknown-user", "the broker said 'unknown-user'"),
    (b"garbage", "malformed server-first message"),
    (b"\xff\xfe", "malformed server-first message"),
    (b"r=" + b"rOprNGfwEbeRWgbNEkqO" + b"x" * 5000 + b",s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096", "of 5056 bytes (at most 4096)"),
])
def test_hostile_server_first_messages_are_typed_errors_at_once(server_first: bytes, why: str) -> None:
    client = rfc_client()
    client.first()
    t0 = time.monotonic()
    with pytest.raises(SaslAuthenticationError, match="SCRAM-SHA-256 authentication failed") as err:
        client.respond(server_first)
    assert why in str(err.value)
    assert err.value.mechanism == "SCRAM-SHA-256" and err.value.code == Errors.SASL_AUTHENTICATION_FAILED
    assert "pencil" not in str(err.value)
    assert time.monotonic() - t0 < 1.0  # bounded: no PBKDF2 of a broker-chosen count
    assert not client.complete
    with pytest.raises(SaslAuthenticationError, match="in state failed"):
        client.respond(RFC_SERVER_FINAL)  # a failed exchange stays failed


@pytest.mark.parametrize(("server_final", "why"), [
    (b"v=AAAATRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=", "invalid server signature"),
    (b"v=", "invalid server signature"),
    (b"v=%%%", "not base64"),
    (b"e=invalid-proof", "the broker said 'invalid-proof'"),
    (b"x=1", "invalid server signature"),
])
def test_a_server_final_message_that_does_not_check_out_is_a_typed_error(server_final: bytes, why: str) -> None:
    client = rfc_client()
    client.first()
    client.respond(RFC_SERVER_FIRST)
    with pytest.raises(SaslAuthenticationError, match=why):
        client.respond(server_final)
    assert not client.complete


def test_scram_iteration_bound_is_kafkas_maximum() -> None:
    client = rfc_client()
    client.first()
    at_max = RFC_SERVER_FIRST.replace(b"i=4096", f"i={SCRAM_MAX_ITERATIONS}".encode())
    assert client.respond(at_max) is not None  # 16384 is allowed (Kafka stores up to it)


def test_a_server_first_message_of_4096_bytes_is_read_one_more_is_refused() -> None:
    pad = 4096 - len(RFC_SERVER_FIRST)
    longest = RFC_SERVER_FIRST.replace(b"%hv", b"%hv" + b"x" * pad)
    assert len(longest) == 4096
    client = rfc_client()
    client.first()
    assert client.respond(longest) is not None
    client = rfc_client()
    client.first()
    with pytest.raises(SaslAuthenticationError, match="of 4097 bytes"):
        client.respond(longest.replace(b"%hv", b"%hvx"))


def test_scram_needs_a_scram_mechanism() -> None:
    with pytest.raises(ValueError, match="not a SCRAM mechanism: 'SCRAM-SHA-1'"):
        ScramClient("SCRAM-SHA-1", "u", "p")


def test_plain_token_and_no_password_in_reprs() -> None:
    plain = PlainClient("alice", "alice-secret")
    assert not plain.complete
    assert plain.first() == b"\0alice\0alice-secret"
    assert not plain.complete  # only the broker's answer completes it
    assert plain.respond(b"") is None and plain.complete
    assert "alice-secret" not in repr(SaslAuthenticateRequest(plain.first()))
    security = consumer_config({"security_protocol": "SASL_PLAINTEXT", "sasl_plain_username": "alice",
                                "sasl_plain_password": "alice-secret"})["security"]
    assert security == Security("SASL_PLAINTEXT", None, "PLAIN", "alice", "alice-secret")
    assert "alice-secret" not in repr(security)


# --- the frames, as kafka-python writes and reads them --------------------------------------------
def test_sasl_requests_encode_as_kafka_python_does() -> None:
    for version in (0, 1):
        ours = _core.encode_request(_core.RequestHeader(17, version, 5, "c"), SaslHandshakeRequest("SCRAM-SHA-256"))
        theirs = ksasl.SaslHandshakeRequest(mechanism="SCRAM-SHA-256", version=version)
        theirs.with_header(correlation_id=5, client_id="c")
        assert ours[4:] == bytes(theirs.encode(header=True))
    for version in (0, 1, 2):
        ours = _core.encode_request(_core.RequestHeader(36, version, 6, "c"), SaslAuthenticateRequest(b"\0u\0p"))
        theirs = ksasl.SaslAuthenticateRequest(auth_bytes=b"\0u\0p", version=version)
        theirs.with_header(correlation_id=6, client_id="c")
        assert ours[4:] == bytes(theirs.encode(header=True))


def test_sasl_responses_decode_as_kafka_python_writes_them() -> None:
    for version in (0, 1):
        r = ksasl.SaslHandshakeResponse(error_code=33, mechanisms=["PLAIN", "SCRAM-SHA-512"], version=version)
        r.with_header(correlation_id=9)
        assert _core.decode_response(17, version, bytes(r.encode(header=True))) == (
            9, SaslHandshakeResponse(Errors.UNSUPPORTED_SASL_MECHANISM, ("PLAIN", "SCRAM-SHA-512")))
    for version in (0, 1, 2):
        r = ksasl.SaslAuthenticateResponse(error_code=58, error_message="no", auth_bytes=b"v=x",
                                           session_lifetime_ms=77 if version else 0, version=version)
        r.with_header(correlation_id=3)
        assert _core.decode_response(36, version, bytes(r.encode(header=True))) == (
            3, SaslAuthenticateResponse(Errors.SASL_AUTHENTICATION_FAILED, "no", b"v=x", 77 if version else 0))
    assert (17, 0, 1) in _core.CLIENT_API_VERSIONS and (36, 0, 2) in _core.CLIENT_API_VERSIONS
    # serve does not speak SASL: its codec table (what it advertises and decodes) stays without it
    assert {k for k, _, _ in _core.WIRE_API_VERSIONS}.isdisjoint({17, 36})


# --- settings ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("make", [consumer_config, producer_config])
def test_settings(make: Callable[[dict], dict]) -> None:
    assert make({})["security"] == Security()
    sasl = make({"security_protocol": "SASL_PLAINTEXT", "sasl_plain_username": "u", "sasl_plain_password": "p"})
    assert sasl["security"].sasl_mechanism == "PLAIN" and sasl["security"].ssl_context is None  # kafka-python's default
    tls = make({"security_protocol": "SSL", "ssl_check_hostname": False})["security"]
    assert tls.sasl_mechanism is None and tls.ssl_context.verify_mode == ssl.CERT_REQUIRED
    assert not tls.ssl_context.check_hostname
    assert make({"security_protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-512", "sasl_plain_username": "u",
                 "sasl_plain_password": "p"})["security"].ssl_context.check_hostname
    own = ssl.create_default_context()
    assert make({"security_protocol": "SSL", "ssl_context": own})["security"].ssl_context is own
    with pytest.raises(ValueError, match="security_protocol must be one of PLAINTEXT, SSL"):
        make({"security_protocol": "TLS"})
    with pytest.raises(ValueError, match="sasl_mechanism must be one of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512"):
        make({"security_protocol": "SASL_SSL", "sasl_mechanism": "GSSAPI", "sasl_plain_username": "u",
              "sasl_plain_password": "p"})
    with pytest.raises(ValueError, match="needs sasl_plain_username and sasl_plain_password"):
        make({"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "SCRAM-SHA-256"})
    for username, password in (("u", None), (None, "p"), ("", "p"), ("u", 5)):
        with pytest.raises(ValueError, match="needs sasl_plain_username and sasl_plain_password"):
            make({"security_protocol": "SASL_PLAINTEXT", "sasl_plain_username": username,
                  "sasl_plain_password": password})
    with pytest.raises(ValueError, match="GSSAPI"):
        make({"sasl_kerberos_service_name": "kafka"})
    with pytest.raises(ValueError, match=r"ssl_context must be an ssl\.SSLContext"):
        make({"security_protocol": "SSL", "ssl_context": "yes"})
    with pytest.raises(ValueError, match="ssl_check_hostname must be True or False: 'false'"):
        make({"security_protocol": "SSL", "ssl_check_hostname": "false"})
    with pytest.raises(FileNotFoundError, match=r"ssl_cafile '/nonexistent/ca\.pem' is not a file"):
        make({"security_protocol": "SSL", "ssl_cafile": "/nonexistent/ca.pem"})
    with pytest.raises(FileNotFoundError, match=r"ssl_keyfile '/nonexistent/key\.pem' is not a file"):
        make({"security_protocol": "SSL", "ssl_certfile": __file__, "ssl_keyfile": "/nonexistent/key.pem"})
    assert make({"security_protocol": "sasl_plaintext", "sasl_plain_username": "u",
                 "sasl_plain_password": "p"})["security"].protocol == "SASL_PLAINTEXT"  # any case, as Java's


# --- the SASL handshake against tiny brokers -----------------------------------------------------------
SASL_SERVED = BROKER_API_VERSIONS.with_range(17, 0, 1).with_range(36, 0, 2)
METADATA = MetadataResponse((), brokers=(MetadataResponseBroker(1, "127.0.0.1", 1),), version=12)
Broker = Callable[[asyncio.StreamReader, asyncio.StreamWriter, list], Awaitable[None]]


async def read_frame(reader: asyncio.StreamReader) -> tuple[int, int, int, bytes]:
    (size,) = struct.unpack(">i", await reader.readexactly(4))
    frame = await reader.readexactly(size)
    key, version, correlation = struct.unpack(">hhi", frame[:8])
    return key, version, correlation, frame


async def reply(writer: asyncio.StreamWriter, response: object, correlation: int) -> None:
    response.with_header(correlation_id=correlation)  # type: ignore[attr-defined]
    body = bytes(response.encode(header=True))  # type: ignore[attr-defined]
    writer.write(struct.pack(">i", len(body)) + body)
    await writer.drain()


async def api_versions(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, served=SASL_SERVED) -> None:
    _, _, _, frame = await read_frame(reader)
    header, request = _core.decode_request(frame)
    assert isinstance(request, ApiVersionsRequest)
    writer.write(_core.encode_response(header, answer_api_versions(request, served)))


async def sasl_broker(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, seen: list, *,
                      mechanisms: tuple[str, ...] = ("PLAIN",), accept: bytes | None = b"\0alice\0secret",
                      challenges: tuple[bytes, ...] = ()) -> None:
    await api_versions(reader, writer)
    key, version, correlation, frame = await read_frame(reader)
    assert (key, version) == (17, 1)
    mechanism = ksasl.SaslHandshakeRequest.decode(frame, version=1, header=True).mechanism
    seen.append(("handshake", mechanism))
    if mechanism not in mechanisms:
        await reply(writer, ksasl.SaslHandshakeResponse(error_code=33, mechanisms=list(mechanisms), version=1),
                    correlation)
        return
    await reply(writer, ksasl.SaslHandshakeResponse(error_code=0, mechanisms=list(mechanisms), version=1), correlation)
    for challenge in (*challenges, None):
        key, version, correlation, frame = await read_frame(reader)
        assert (key, version) == (36, 2)
        token = ksasl.SaslAuthenticateRequest.decode(frame, version=2, header=True).auth_bytes
        seen.append(("token", bytes(token)))
        if challenge is not None:
            await reply(writer, ksasl.SaslAuthenticateResponse(error_code=0, auth_bytes=challenge, version=2),
                        correlation)
            continue
        if accept is not None and bytes(token) != accept:
            await reply(writer, ksasl.SaslAuthenticateResponse(
                error_code=58, error_message="Authentication failed: Invalid username or password", version=2),
                correlation)
            return
        await reply(writer, ksasl.SaslAuthenticateResponse(error_code=0, auth_bytes=b"", version=2), correlation)
    while True:  # authenticated: Metadata answered
        _, _, _, frame = await read_frame(reader)
        header, _ = _core.decode_request(frame)
        seen.append(("request", header.api_key))
        writer.write(_core.encode_response(header, METADATA))


def run_against(broker: Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]],
                body: Callable[[NetworkClient], Awaitable[None]], security: Security) -> None:
    async def main() -> None:
        async def closing(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                await broker(reader, writer)
            except (ConnectionError, asyncio.IncompleteReadError):
                pass
            finally:
                writer.close()

        server = await asyncio.start_server(closing, "127.0.0.1", 0)
        client = NetworkClient(f"127.0.0.1:{server.sockets[0].getsockname()[1]}", client_id="sasl-test",
                               request_timeout_ms=5_000, security=security)
        try:
            await body(client)
        finally:
            await client.close()
            server.close()
            await server.wait_closed()

    asyncio.run(asyncio.wait_for(main(), 20))


PLAIN = Security("SASL_PLAINTEXT", None, "PLAIN", "alice", "secret")


def test_plain_authenticates_before_any_other_request() -> None:
    seen: list = []

    async def body(client: NetworkClient) -> None:
        assert await client.send(-1, MetadataRequest(("t",))) == METADATA
    run_against(lambda r, w: sasl_broker(r, w, seen), body, PLAIN)
    assert seen == [("handshake", "PLAIN"), ("token", b"\0alice\0secret"), ("request", ApiKey.METADATA)]


def test_a_refused_password_is_a_typed_error_naming_mechanism_and_broker_message_and_the_node_backs_off() -> None:
    seen: list = []

    async def body(client: NetworkClient) -> None:
        t0 = time.monotonic()
        with pytest.raises(SaslAuthenticationError) as err:
            await client.send(-1, MetadataRequest(("t",)))
        assert time.monotonic() - t0 < 2.0
        assert str(err.value) == ("PLAIN authentication with node -1 failed: Authentication failed: Invalid "
                                  "username or password")
        assert err.value.mechanism == "PLAIN" and not err.value.retriable and "wrong" not in str(err.value)
        assert client.backoff_remaining_s(-1) > 0  # not hammered: the node waits out its back-off
        with pytest.raises(KafkaConnectionError, match="reconnect back-off"):
            await client.send(-1, MetadataRequest(("t",)))
    run_against(lambda r, w: sasl_broker(r, w, seen), body, Security("SASL_PLAINTEXT", None, "PLAIN", "alice", "wrong"))
    assert ("request", ApiKey.METADATA) not in seen


def test_an_unsupported_mechanism_lists_what_the_broker_offers() -> None:
    async def body(client: NetworkClient) -> None:
        with pytest.raises(UnsupportedSaslMechanismError) as err:
            await client.send(-1, MetadataRequest(("t",)))
        assert err.value.enabled_mechanisms == ("PLAIN", "SCRAM-SHA-512")
        assert err.value.mechanism == "SCRAM-SHA-256"
        assert "does not enable SASL mechanism SCRAM-SHA-256; it offers: PLAIN, SCRAM-SHA-512" in str(err.value)
    run_against(lambda r, w: sasl_broker(r, w, [], mechanisms=("PLAIN", "SCRAM-SHA-512")), body,
                Security("SASL_PLAINTEXT", None, "SCRAM-SHA-256", "alice", "secret"))


def test_a_broker_without_sasl_apis_is_an_illegal_sasl_state() -> None:
    async def broker(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await api_versions(reader, writer, BROKER_API_VERSIONS)  # a PLAINTEXT-only table
        await reader.read()

    async def body(client: NetworkClient) -> None:
        with pytest.raises(IllegalSaslStateError, match="does not serve SaslHandshake v1"):
            await client.send(-1, MetadataRequest(("t",)))
    run_against(broker, body, PLAIN)


def test_a_scram_broker_asking_for_a_huge_pbkdf2_is_refused_at_once() -> None:
    seen: list = []

    async def body(client: NetworkClient) -> None:
        t0 = time.monotonic()
        with pytest.raises(SaslAuthenticationError, match="iteration count 2147483647 outside"):
            await client.send(-1, MetadataRequest(("t",)))
        assert time.monotonic() - t0 < 2.0

    async def broker(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await api_versions(reader, writer)
        _, _, correlation, _ = await read_frame(reader)
        await reply(writer, ksasl.SaslHandshakeResponse(error_code=0, mechanisms=["SCRAM-SHA-256"], version=1),
                    correlation)
        _, _, correlation, frame = await read_frame(reader)
        first = bytes(ksasl.SaslAuthenticateRequest.decode(frame, version=2, header=True).auth_bytes)
        nonce = first.split(b",r=")[1]
        seen.append(first)
        await reply(writer, ksasl.SaslAuthenticateResponse(
            error_code=0, auth_bytes=b"r=" + nonce + b"srv,s=c2FsdA==,i=2147483647", version=2), correlation)
        await reader.read()
    run_against(broker, body, Security("SASL_PLAINTEXT", None, "SCRAM-SHA-256", "alice", "secret"))
    assert seen and seen[0].startswith(b"n,,n=alice,r=")


def test_every_authentication_error_is_an_authentication_error() -> None:
    for cls in (SaslAuthenticationError, UnsupportedSaslMechanismError, IllegalSaslStateError):
        assert issubclass(cls, AuthenticationError) and not cls.retriable


def test_other_handshake_and_authenticate_errors_are_illegal_sasl_states() -> None:
    async def handshake_refused(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await api_versions(reader, writer)
        _, _, correlation, _ = await read_frame(reader)
        await reply(writer, ksasl.SaslHandshakeResponse(error_code=34, mechanisms=["PLAIN"], version=1), correlation)
        await reader.read()

    async def authenticate_refused(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await api_versions(reader, writer)
        _, _, correlation, _ = await read_frame(reader)
        await reply(writer, ksasl.SaslHandshakeResponse(error_code=0, mechanisms=["PLAIN"], version=1), correlation)
        _, _, correlation, _ = await read_frame(reader)
        await reply(writer, ksasl.SaslAuthenticateResponse(error_code=34, error_message="out of order", version=2),
                    correlation)
        await reader.read()

    async def handshake_body(client: NetworkClient) -> None:
        with pytest.raises(IllegalSaslStateError, match="SaslHandshake for PLAIN failed \\(ILLEGAL_SASL_STATE\\)"):
            await client.send(-1, MetadataRequest(("t",)))

    async def authenticate_body(client: NetworkClient) -> None:
        with pytest.raises(IllegalSaslStateError, match="PLAIN authentication with node -1: out of order"):
            await client.send(-1, MetadataRequest(("t",)))
    run_against(handshake_refused, handshake_body, PLAIN)
    run_against(authenticate_refused, authenticate_body, PLAIN)


TLS = Security("SSL", ssl.create_default_context())


def test_tls_to_a_broker_that_answers_plaintext_is_an_ssl_authentication_error() -> None:
    async def plaintext(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(5)  # the ClientHello's record header
        writer.write(b"\x00\x00\x00\x10not a tls record")
        await writer.drain()
        await reader.read()

    async def body(client: NetworkClient) -> None:
        t0 = time.monotonic()
        with pytest.raises(SslAuthenticationError, match=r"TLS handshake with node -1 at 127\.0\.0\.1:"):
            await client.send(-1, MetadataRequest(("t",)))
        assert time.monotonic() - t0 < 2.0
    run_against(plaintext, body, TLS)


def test_a_broker_closing_during_the_tls_handshake_is_a_connection_error_with_a_hint() -> None:
    async def closes(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(5)

    async def body(client: NetworkClient) -> None:
        with pytest.raises(KafkaConnectionError, match="during the TLS handshake \\(is it a TLS listener\\?\\)"):
            await client.send(-1, MetadataRequest(("t",)))
    run_against(closes, body, TLS)

    async def plain_body(client: NetworkClient) -> None:  # without TLS, no such hint
        with pytest.raises(KafkaConnectionError) as err:
            await client.send(-1, MetadataRequest(("t",)))
        assert "TLS" not in str(err.value)
    run_against(closes, plain_body, Security())
