"""The night's report mailed to a pipeline's `mail:` list (seed 004: "have the full set of performance
results mailed to us automatically"): the summary as the body, the night's PDF reports attached,
through SMTP with STARTTLS and a login from the environment. A mail server that does not answer
costs the night a few bounded attempts and a line in its record, never the night itself."""

from __future__ import annotations

import smtplib
import ssl
import time
from collections.abc import Sequence
from dataclasses import dataclass
from email.message import EmailMessage
from email.utils import formatdate, make_msgid
from pathlib import Path
from typing import Annotated

import dagster as dg
from pydantic import Field

from nightly_assets.settings import FromEnv, PositiveSeconds, Seconds

MAX_ATTACHMENT_BYTES = 20 * 1024 * 1024  # what common mail servers accept per message, with room to spare


@dataclass(frozen=True)
class MailOutcome:
    sent: bool
    recipients: tuple[str, ...]
    attempts: int
    detail: str  # what was attached, or why nothing was sent

    def record(self) -> dict[str, object]:
        return {
            "sent": self.sent,
            "to": list(self.recipients),
            "attempts": self.attempts,
            "detail": self.detail,
        }


class MailResource(dg.ConfigurableResource):
    """An SMTP server the night's reports go out through; `host` unset: no mail."""

    host: str | None = Field(
        default=None, description="SMTP server (NIGHTLY_SMTP_HOST); unset sends nothing."
    )
    port: Annotated[int, FromEnv] = Field(
        default=587, description="Its port: 587 for STARTTLS submission, 25 inside a network."
    )
    starttls: Annotated[bool, FromEnv] = Field(
        default=True, description="Upgrade to TLS before the login (NIGHTLY_SMTP_STARTTLS)."
    )
    ca_file: str | None = Field(
        default=None, description="CA bundle the server's certificate is checked with."
    )
    username: str | None = Field(default=None, description="Login (NIGHTLY_SMTP_USERNAME); none: no login.")
    password: str | None = Field(default=None, description="Its password, by the variable's name.")
    sender: str = Field(default="nightly@localhost", description="The From address (NIGHTLY_SMTP_FROM).")
    timeout_s: PositiveSeconds = Field(
        default="10", description="How long one connection waits for the server."
    )
    attempts: int = Field(default=3, ge=1, description="Tries before the report is recorded as not sent.")
    backoff_s: Seconds = Field(default="2", description="Wait before the second try, doubled for each next.")

    def send_report(
        self, recipients: Sequence[str], subject: str, body: str, attachments: Sequence[Path] = ()
    ) -> MailOutcome:
        """Mail the report; never raises for the server's sake (the outcome says what happened)."""
        to = tuple(recipients)
        if not self.host or not to:
            return MailOutcome(
                False, to, 0, "no mail server set (NIGHTLY_SMTP_HOST)" if to else "no recipients"
            )
        message, attached = self._message(to, subject, body, attachments)
        why = ""
        for attempt in range(1, self.attempts + 1):
            try:
                self._deliver(message)
                return MailOutcome(True, to, attempt, f"attached: {', '.join(attached) or 'nothing'}")
            except (smtplib.SMTPException, OSError) as exc:  # refused, unreachable, TLS, login
                why = f"{type(exc).__name__}: {exc}"
                if isinstance(exc, smtplib.SMTPAuthenticationError | smtplib.SMTPRecipientsRefused):
                    break  # asking again gives the same answer
                if attempt < self.attempts:
                    time.sleep(float(self.backoff_s) * 2 ** (attempt - 1))
        return MailOutcome(False, to, attempt, f"not sent to {self.host}:{self.port}: {why}")

    def _message(
        self, to: tuple[str, ...], subject: str, body: str, attachments: Sequence[Path]
    ) -> tuple[EmailMessage, list[str]]:
        message = EmailMessage()
        message["From"] = self.sender
        message["To"] = ", ".join(to)
        message["Subject"] = subject
        message["Date"] = formatdate(localtime=False)
        message["Message-ID"] = make_msgid(domain=self.sender.rpartition("@")[2] or "localhost")
        message.set_content(body)
        attached = []
        total = 0
        for path in attachments:
            size = path.stat().st_size
            if total + size > MAX_ATTACHMENT_BYTES:
                continue  # the summary links to it; the body says the night's folder holds it
            total += size
            message.add_attachment(
                path.read_bytes(), maintype="application", subtype="pdf", filename=path.name
            )
            attached.append(path.name)
        return message, attached

    def _deliver(self, message: EmailMessage) -> None:
        assert self.host is not None
        with smtplib.SMTP(self.host, self.port, timeout=float(self.timeout_s)) as smtp:
            smtp.ehlo()
            if self.starttls:
                smtp.starttls(context=ssl.create_default_context(cafile=self.ca_file))
                smtp.ehlo()
            if self.username:
                smtp.login(self.username, self.password or "")
            smtp.send_message(message)
