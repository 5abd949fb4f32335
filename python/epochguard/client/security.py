"""TLS and SASL for `epochguard.client`: the settings, the `ssl.SSLContext`, and the SASL mechanisms.

Mirrors Kafka's `ChannelBuilders` / `SslFactory` (the TLS context from `ssl.*` settings) and the client
side of `SaslClientAuthenticator` with its mechanisms: `PlainSaslClient` (RFC 4616) and
`ScramSaslClient` with `ScramFormatter` (SCRAM-SHA-256 / SCRAM-SHA-512, RFC 5802 and RFC 7677), as
kafka-python names their settings (`security_protocol`, `ssl_*`, `sasl_mechanism`,
`sasl_plain_username`, `sasl_plain_password`). The mechanisms are sans-IO: `first()` is the client's
first token, `respond(challenge)` the next one; `complete` once the exchange is done. The network layer
(`network.BrokerConnection`) sends them in SaslAuthenticate requests after a SaslHandshake v1.

SCRAM checks what the broker says as Java's `ScramSaslClient` does: its nonce must start with ours
(and add to it), the iteration count must lie in Kafka's bounds [4096, 16384] (its `ScramMechanism`
minimum; the most `ScramControlManager` stores: a count outside is a broker that is broken or
hostile, and an unbounded PBKDF2 would hang the client), the salt must be base64, and the server's
signature in its final message must be the one the password gives (compared in constant time). Any of
these failing is `SaslAuthenticationError`, naming the mechanism, never the password.
Re-authentication (KIP-368, `connections.max.reauth.ms`) is not done: a broker that expires sessions
closes the connection, and the client reconnects and authenticates again.
"""

from __future__ import annotations

import base64
import binascii
import errno
import hashlib
import hmac
import os
import secrets
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from epochguard.errors import SaslAuthenticationError

__all__ = ["SECURITY_DEFAULTS", "SECURITY_UNSUPPORTED", "SECURITY_PROTOCOLS", "SASL_MECHANISMS", "Security",
           "security_of", "SaslClient", "PlainClient", "ScramClient", "SCRAM_MIN_ITERATIONS", "SCRAM_MAX_ITERATIONS"]

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
SCRAM_MIN_ITERATIONS = 4096  # Kafka's ScramMechanism.minIterations (both hashes)
SCRAM_MAX_ITERATIONS = 16384  # Kafka's ScramControlManager.MAX_ITERATIONS: no credential has more
_SCRAM_MAX_MESSAGE = 4096  # bytes of a server-first / server-final message (Kafka's are ~100)

# kafka-python's names and defaults (ssl_check_hostname True, as kafka-python and Java's
# ssl.endpoint.identification.algorithm=https).
SECURITY_DEFAULTS: dict[str, Any] = {
    "security_protocol": "PLAINTEXT",
    "ssl_context": None,
    "ssl_check_hostname": True,
    "ssl_cafile": None,
    "ssl_certfile": None,
    "ssl_keyfile": None,
    "ssl_password": None,
    "ssl_crlfile": None,
    "ssl_ciphers": None,
    "sasl_mechanism": None,
    "sasl_plain_username": None,
    "sasl_plain_password": None,
}

# kafka-python security settings refused when set, and why.
SECURITY_UNSUPPORTED: dict[str, str] = {
    "sasl_kerberos_name": "SASL GSSAPI (Kerberos) is not implemented: PLAIN and SCRAM-SHA-256/512 are",
    "sasl_kerberos_service_name": "SASL GSSAPI (Kerberos) is not implemented: PLAIN and SCRAM-SHA-256/512 are",
    "sasl_kerberos_domain_name": "SASL GSSAPI (Kerberos) is not implemented: PLAIN and SCRAM-SHA-256/512 are",
    "sasl_oauth_token_provider": "SASL OAUTHBEARER is not implemented: PLAIN and SCRAM-SHA-256/512 are",
}


class SaslClient(Protocol):
    """One SASL exchange, client side."""

    mechanism: str
    complete: bool

    def first(self) -> bytes: ...

    def respond(self, challenge: bytes) -> bytes | None:
        """The next token for the broker's `challenge`; None once the exchange is complete."""
        ...


@dataclass(frozen=True)
class Security:
    """What a connection needs: a TLS context (SSL, SASL_SSL) and SASL credentials (SASL_*)."""

    protocol: str = "PLAINTEXT"
    ssl_context: ssl.SSLContext | None = None
    sasl_mechanism: str | None = None
    username: str = ""
    password: str = field(default="", repr=False)

    def sasl_client(self) -> SaslClient | None:
        if self.sasl_mechanism is None:
            return None
        if self.sasl_mechanism == "PLAIN":
            return PlainClient(self.username, self.password)
        return ScramClient(self.sasl_mechanism, self.username, self.password)


def security_of(config: Mapping[str, Any]) -> Security:
    """The `Security` for a client's settings; ValueError for settings that do not fit together."""
    protocol = config["security_protocol"]
    if isinstance(protocol, str):
        protocol = protocol.upper()  # as Java's SecurityProtocol.forName
    if protocol not in SECURITY_PROTOCOLS:
        raise ValueError(f"security_protocol must be one of {', '.join(SECURITY_PROTOCOLS)}: {protocol!r}")
    tls, sasl = protocol in ("SSL", "SASL_SSL"), protocol.startswith("SASL_")
    context = _ssl_context(config) if tls else None
    if not sasl:
        return Security(protocol, context)
    mechanism = config["sasl_mechanism"] or "PLAIN"  # kafka-python's default mechanism
    if mechanism not in SASL_MECHANISMS:
        raise ValueError(f"sasl_mechanism must be one of {', '.join(SASL_MECHANISMS)}: {mechanism!r}")
    username, password = config["sasl_plain_username"], config["sasl_plain_password"]
    if not isinstance(username, str) or not isinstance(password, str) or not username:
        raise ValueError(f"security_protocol {protocol} with {mechanism} needs sasl_plain_username and "
                         "sasl_plain_password (strings)")
    return Security(protocol, context, mechanism, username, password)


def _ssl_context(config: Mapping[str, Any]) -> ssl.SSLContext:
    given = config["ssl_context"]
    if given is not None:
        if not isinstance(given, ssl.SSLContext):
            raise ValueError(f"ssl_context must be an ssl.SSLContext: {type(given).__name__}")
        return given
    # The broker's certificate is always verified (ssl_cafile, else the system's CAs); the host name
    # too unless ssl_check_hostname=False.
    for name in ("ssl_cafile", "ssl_certfile", "ssl_keyfile", "ssl_crlfile"):
        path = config[name]
        if path is not None and not os.path.isfile(path):  # ssl's own error does not say which file
            raise FileNotFoundError(errno.ENOENT, f"{name} {path!r} is not a file")
    check_hostname = config["ssl_check_hostname"]
    if not isinstance(check_hostname, bool):  # "false" would be true
        raise ValueError(f"ssl_check_hostname must be True or False: {check_hostname!r}")
    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=config["ssl_cafile"])
    context.check_hostname = check_hostname
    if config["ssl_certfile"] is not None:  # a client certificate (the broker's ssl.client.auth)
        context.load_cert_chain(config["ssl_certfile"], config["ssl_keyfile"], config["ssl_password"])
    if config["ssl_crlfile"] is not None:
        context.load_verify_locations(config["ssl_crlfile"])
        context.verify_flags |= ssl.VERIFY_CRL_CHECK_LEAF
    if config["ssl_ciphers"] is not None:
        context.set_ciphers(config["ssl_ciphers"])
    return context


class PlainClient:
    """SASL/PLAIN (RFC 4616, Kafka's `PlainSaslClient`): one token, `\\0user\\0password`."""

    mechanism = "PLAIN"

    def __init__(self, username: str, password: str) -> None:
        self._token = b"\0" + username.encode() + b"\0" + password.encode()
        self.complete = False

    def first(self) -> bytes:
        return self._token

    def respond(self, challenge: bytes) -> bytes | None:
        self.complete = True  # the broker's answer to PLAIN is empty: success is its error code
        return None


def _sasl_name(name: str) -> str:
    """RFC 5802's saslname: ',' and '=' escaped (Kafka's `ScramFormatter.saslName`)."""
    return name.replace("=", "=3D").replace(",", "=2C")


class ScramClient:
    """SCRAM-SHA-256 / SCRAM-SHA-512 (RFC 5802, RFC 7677; Kafka's `ScramSaslClient`), no channel
    binding, no authorization id. `nonce`: the client nonce (random when not given; tests give RFC 7677's)."""

    def __init__(self, mechanism: str, username: str, password: str, nonce: str | None = None) -> None:
        hashes = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
        if mechanism not in hashes:
            raise ValueError(f"not a SCRAM mechanism: {mechanism!r}")
        self.mechanism = mechanism
        self._hash = hashes[mechanism]
        self._password = password.encode()
        self._nonce = nonce or secrets.token_urlsafe(24)
        self._first_bare = f"n={_sasl_name(username)},r={self._nonce}"
        self._expected_server_signature: bytes | None = None
        self._state = "first"
        self.complete = False

    def _fail(self, reason: str) -> SaslAuthenticationError:
        self._state = "failed"
        return SaslAuthenticationError(f"{self.mechanism} authentication failed: {reason}", self.mechanism)

    def _hmac(self, key: bytes, msg: bytes) -> bytes:
        return hmac.new(key, msg, self._hash).digest()

    def first(self) -> bytes:
        self._state = "server-first"
        return ("n,," + self._first_bare).encode()

    def respond(self, challenge: bytes) -> bytes | None:
        if self._state == "server-first":
            return self._client_final(challenge)
        if self._state == "server-final":
            self._verify_final(challenge)
            return None
        raise self._fail(f"a server message in state {self._state}")

    @staticmethod
    def _attributes(message: str) -> dict[str, str]:
        out: dict[str, str] = {}
        for part in message.split(","):
            key, sep, value = part.partition("=")
            if not sep or len(key) != 1:
                raise ValueError(f"malformed attribute {part[:40]!r}")
            out.setdefault(key, value)
        return out

    def _decode(self, challenge: bytes, what: str) -> dict[str, str]:
        if len(challenge) > _SCRAM_MAX_MESSAGE:
            raise self._fail(f"{what} of {len(challenge)} bytes (at most {_SCRAM_MAX_MESSAGE})")
        try:
            return self._attributes(challenge.decode())
        except (UnicodeDecodeError, ValueError) as exc:
            raise self._fail(f"malformed {what}: {exc}") from None

    def _client_final(self, server_first: bytes) -> bytes:
        attrs = self._decode(server_first, "server-first message")
        if "e" in attrs:
            raise self._fail(f"the broker said {attrs['e']!r}")
        nonce, salt_b64, iterations_text = attrs.get("r"), attrs.get("s"), attrs.get("i")
        if nonce is None or salt_b64 is None or iterations_text is None:
            raise self._fail("server-first message without r=, s= or i=")
        if not nonce.startswith(self._nonce) or len(nonce) == len(self._nonce):
            raise self._fail("invalid server nonce: it does not extend the client nonce")
        try:
            salt = base64.b64decode(salt_b64, validate=True)
            iterations = int(iterations_text)
        except (binascii.Error, ValueError):
            raise self._fail("server-first message with a salt that is not base64 or a count that is not "
                             "a number") from None
        if not SCRAM_MIN_ITERATIONS <= iterations <= SCRAM_MAX_ITERATIONS:
            raise self._fail(f"iteration count {iterations} outside [{SCRAM_MIN_ITERATIONS}, "
                             f"{SCRAM_MAX_ITERATIONS}]")
        salted = hashlib.pbkdf2_hmac(self._hash, self._password, salt, iterations)
        client_key = self._hmac(salted, b"Client Key")
        stored_key = hashlib.new(self._hash, client_key).digest()
        without_proof = f"c={base64.b64encode(b'n,,').decode()},r={nonce}"
        auth_message = f"{self._first_bare},{server_first.decode()},{without_proof}".encode()
        signature = self._hmac(stored_key, auth_message)
        proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        self._expected_server_signature = self._hmac(self._hmac(salted, b"Server Key"), auth_message)
        self._state = "server-final"
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()

    def _verify_final(self, server_final: bytes) -> None:
        attrs = self._decode(server_final, "server-final message")
        if "e" in attrs:
            raise self._fail(f"the broker said {attrs['e']!r}")
        try:
            signature = base64.b64decode(attrs.get("v", ""), validate=True)
        except binascii.Error:
            raise self._fail("server-final signature is not base64") from None
        assert self._expected_server_signature is not None
        if not signature or not hmac.compare_digest(signature, self._expected_server_signature):
            raise self._fail("invalid server signature in the server-final message (the broker does not "
                             "know this password)")
        self._state = "done"
        self.complete = True
