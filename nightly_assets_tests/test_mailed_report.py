"""The night's report mailed through a real SMTP server on loopback that requires STARTTLS and a
login: recipients, headers and the PDF attachment as the server received them; a server that is
down or refuses the login costs bounded attempts and a line in the night's record, never the night."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import yaml

from nightly_assets.reporting.mail import MailResource
from nightly_assets_tests.catalog_files import read_pipeline
from nightly_assets_tests.catalog_nights import CatalogNights
from nightly_assets_tests.peers.process import free_port
from nightly_assets_tests.peers.smtp import PASSWORD, USER, SmtpServer

pytestmark = pytest.mark.smtp
TEAM = ["theta-perf@lab.example.org", "release@lab.example.org"]


def _resource(server: SmtpServer, **overrides: object) -> MailResource:
    settings: dict[str, object] = {
        "host": "127.0.0.1",
        "port": server.port,
        "ca_file": str(server.ca_file),
        "username": USER,
        "password": PASSWORD,
        "sender": "nightly@ci.example.org",
        "backoff_s": "0.1",
        **overrides,
    }
    return MailResource(**settings)  # type: ignore[arg-type]


def _pdf(path: Path) -> Path:
    from matplotlib.figure import Figure

    figure = Figure()
    figure.add_subplot().plot([1, 2, 3], [2, 1, 3])
    figure.savefig(path, format="pdf")
    return path


def test_the_report_arrives_with_its_recipients_headers_and_pdf(
    smtp_server: SmtpServer, tmp_path: Path
) -> None:
    pdf = _pdf(tmp_path / "theta_report.pdf")
    outcome = _resource(smtp_server).send_report(
        TEAM, "tf_theta: night 2026-11-03 on theta: success", "# Summary\n", [pdf]
    )
    assert outcome.sent and outcome.attempts == 1 and "theta_report.pdf" in outcome.detail
    [received] = smtp_server.received
    assert received.rcpt_tos == TEAM and received.mail_from == "nightly@ci.example.org"
    message = received.message
    assert message["Subject"] == "tf_theta: night 2026-11-03 on theta: success"
    assert message["To"] == ", ".join(TEAM) and message["Message-ID"] and message["Date"]
    [attachment] = list(message.iter_attachments())
    assert (
        attachment.get_filename() == "theta_report.pdf" and attachment.get_content_type() == "application/pdf"
    )
    assert attachment.get_content() == pdf.read_bytes()
    body = message.get_body(preferencelist=("plain",))
    assert body is not None and "# Summary" in body.get_content()
    assert smtp_server.logins == [USER]


def test_a_server_that_is_down_costs_bounded_attempts_and_raises_nothing(tmp_path: Path) -> None:
    mail = MailResource(host="127.0.0.1", port=free_port(), backoff_s="0.1", timeout_s="2")
    started = time.monotonic()
    outcome = mail.send_report(TEAM, "subject", "body")
    assert not outcome.sent and outcome.attempts == 3
    assert "ConnectionRefusedError" in outcome.detail and f"127.0.0.1:{mail.port}" in outcome.detail
    assert time.monotonic() - started < 10  # 0.1 + 0.2 s of backoff, refused at once


def test_a_refused_login_is_not_asked_again_and_the_password_is_not_in_the_record(
    smtp_server: SmtpServer,
) -> None:
    outcome = _resource(smtp_server, password="wrong-password-canary").send_report(TEAM, "s", "b")
    assert not outcome.sent and outcome.attempts == 1 and "SMTPAuthenticationError" in outcome.detail
    assert "wrong-password-canary" not in str(outcome.record()) and smtp_server.received == []
    assert smtp_server.refused_logins >= 1  # smtplib tries each mechanism the server offers, once


def test_a_plain_connection_is_refused_by_a_server_that_requires_tls(smtp_server: SmtpServer) -> None:
    outcome = _resource(smtp_server, starttls=False).send_report(TEAM, "s", "b")
    assert not outcome.sent and smtp_server.received == []


@pytest.mark.slow
def test_a_demo_night_mails_its_summary_to_the_catalogs_list_once(
    smtp_server: SmtpServer, catalog_nights: CatalogNights, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in smtp_server.env().items():
        monkeypatch.setenv(name, value)
    demo = read_pipeline(catalog_nights.catalog, "demo")
    demo["mail"] = TEAM
    _, stages, outcome = catalog_nights.run(yaml.safe_dump(demo, sort_keys=False), "2026-11-03")
    assert outcome.succeeded and stages["night_summary"].status == "success"
    [received] = smtp_server.received
    assert received.rcpt_tos == TEAM
    assert received.message["Subject"].endswith("night 2026-11-03 on cpu: success")
    body = received.message.get_body(preferencelist=("plain",))
    assert body is not None and "tests_unit" in body.get_content()
    assert (
        PASSWORD
        not in (catalog_nights.home / "artefacts/demo/2026-11-03/cpu/night_summary/manifest.json").read_text()
    )
