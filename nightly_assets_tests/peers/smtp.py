"""The mail server peer: a real SMTP server (aiosmtpd) on 127.0.0.1 that requires STARTTLS (its own
certificate, which the test's CA file trusts) and a login, and keeps every message it accepts."""

from __future__ import annotations

import datetime as dt
import email
import email.policy
import ipaddress
import ssl
from collections.abc import Iterator
from dataclasses import dataclass, field
from email.message import EmailMessage
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from nightly_assets_tests.peers.process import free_port

USER, PASSWORD = "nightly-mailer", "smtp-canary-3e9a1f"


@dataclass
class Received:
    mail_from: str
    rcpt_tos: list[str]
    message: EmailMessage


@dataclass
class SmtpServer:
    port: int
    ca_file: Path
    received: list[Received] = field(default_factory=list)
    logins: list[str] = field(default_factory=list)  # user names that logged in
    refused_logins: int = 0

    def env(self) -> dict[str, str]:
        """The NIGHTLY_SMTP_* settings that reach it."""
        return {
            "NIGHTLY_SMTP_HOST": "127.0.0.1",
            "NIGHTLY_SMTP_PORT": str(self.port),
            "NIGHTLY_SMTP_CA_FILE": str(self.ca_file),
            "NIGHTLY_SMTP_USERNAME": USER,
            "NIGHTLY_SMTP_PASSWORD": PASSWORD,
            "NIGHTLY_SMTP_FROM": "nightly@ci.example.org",
        }


def _certificate(folder: Path) -> tuple[Path, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), True)
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = folder / "smtp.crt", folder / "smtp.key"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return cert_file, key_file


@pytest.fixture
def smtp_server(tmp_path: Path) -> Iterator[SmtpServer]:
    from aiosmtpd.controller import Controller
    from aiosmtpd.smtp import AuthResult, LoginPassword

    cert_file, key_file = _certificate(tmp_path)
    server = SmtpServer(free_port(), cert_file)

    class Handler:
        async def handle_DATA(self, _server: Any, _session: Any, envelope: Any) -> str:
            parsed = email.message_from_bytes(envelope.content, policy=email.policy.default)
            assert isinstance(parsed, EmailMessage)
            server.received.append(Received(envelope.mail_from, list(envelope.rcpt_tos), parsed))
            return "250 OK"

    def authenticate(_server: Any, _session: Any, _envelope: Any, _mechanism: str, data: Any) -> AuthResult:
        if isinstance(data, LoginPassword) and (data.login.decode(), data.password.decode()) == (
            USER,
            PASSWORD,
        ):
            server.logins.append(USER)
            return AuthResult(success=True)
        server.refused_logins += 1
        return AuthResult(success=False, handled=False)

    tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    tls.load_cert_chain(cert_file, key_file)
    controller = Controller(
        Handler(),
        hostname="127.0.0.1",
        port=server.port,
        tls_context=tls,
        require_starttls=True,
        authenticator=authenticate,
        auth_required=True,
        auth_require_tls=True,
    )
    controller.start()
    try:
        yield server
    finally:
        controller.stop()
