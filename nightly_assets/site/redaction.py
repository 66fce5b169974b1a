"""What a results page must not carry, found and taken out before it is written: the values of
this process's secret variables (on every site), and on a public site also credentials in URLs,
well-known token shapes and private host names. Findings name the kind and never the value."""

from __future__ import annotations

import ipaddress
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

from nightly_assets.process import names_a_secret

MIN_SECRET_CHARS = 8  # shorter values ("1", "true", a user name) would redact ordinary words
TOKEN_SHAPES = {
    "GitHub token": re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,})"),
    "Slack token": re.compile(r"\bxox[abposr]-[A-Za-z0-9-]{10,}"),
    "AWS access key": re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"),
    "private key": re.compile(
        r"-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?(?:-----END [A-Z ]*PRIVATE KEY-----|$)"
    ),
    "bearer token": re.compile(r"(?i)\bbearer\s+[A-Za-z0-9._~+/=-]{16,}"),
}
URL_CREDENTIALS = re.compile(r"(?P<scheme>[a-z][a-z0-9+.-]*://)[^\s/@:\"'<>]+:[^\s/@\"'<>]+@", re.IGNORECASE)
HOST = re.compile(
    r"\b(?:[a-z0-9-]+\.)*[a-z0-9-]+\.(?:internal|local|lan|corp|intranet|home\.arpa)\b", re.IGNORECASE
)
IPV4 = re.compile(r"\b(?:\d{1,3}\.){3}\d{1,3}\b")
LOCAL_NAMES = ("localhost",)


@dataclass(frozen=True)
class Finding:
    path: str
    kind: str


class PublicSiteError(ValueError):
    """A public site that cannot be published as asked; the message says what to change."""


def secret_values(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """{value: variable name} of the variables whose names say they hold credentials."""
    env = os.environ if environ is None else environ
    return {
        value: name for name, value in env.items() if names_a_secret(name) and len(value) >= MIN_SECRET_CHARS
    }


def is_private_host(host: str) -> bool:
    """Loopback, link-local and private addresses, and names only an intranet resolves."""
    host = host.strip("[]").lower()
    if host in LOCAL_NAMES or HOST.fullmatch(host):
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    return address.is_private or address.is_loopback or address.is_link_local


def check_public_links(base_url: str) -> None:
    """A public site's evidence links must open for anyone: not on a private address."""
    host = urlsplit(base_url).hostname or ""
    if not host or is_private_host(host):
        raise PublicSiteError(
            f"the artefact links point at {base_url}, which only this network reaches: set "
            "NIGHTLY_ARTEFACTS_URL (or a bucket's NIGHTLY_ARTEFACTS_BUCKET) to where the public reads "
            "the artefacts, or leave `public` out of the pipeline's catalog entry"
        )


class Redactor:
    """Takes secrets (and, for a public site, private hosts and token shapes) out of page texts."""

    def __init__(self, secrets: Mapping[str, str], *, public: bool) -> None:
        # Longest first: a secret that contains another is replaced whole.
        self.secrets = sorted(secrets.items(), key=lambda item: -len(item[0]))
        self.public = public

    def redact(self, text: str) -> tuple[str, list[str]]:
        """The text without what it must not carry, and the kinds of what was taken out."""
        kinds: list[str] = []
        for value, name in self.secrets:
            if value in text:
                text = text.replace(value, f"[redacted {name}]")
                kinds.append(f"the value of {name}")
        if not self.public:
            return text, kinds
        for kind, shape in TOKEN_SHAPES.items():
            text, count = shape.subn(f"[redacted {kind}]", text)
            kinds += [kind] * count
        text, count = URL_CREDENTIALS.subn(lambda m: f"{m['scheme']}[redacted credentials]@", text)
        kinds += ["credentials in a URL"] * count
        text, count = HOST.subn("[internal host]", text)
        kinds += ["an internal host name"] * count
        replaced: list[str] = []
        text = IPV4.sub(lambda m: _private_address(m, replaced), text)
        kinds += ["a private address"] * len(replaced)
        return text, kinds

    def findings(self, path: str, text: str) -> list[Finding]:
        """What is still there (none after `redact`): the last check before a public site is written."""
        _, kinds = self.redact(text)
        return [Finding(path, kind) for kind in kinds]


def _private_address(match: re.Match[str], replaced: list[str]) -> str:
    if not is_private_host(match.group(0)):
        return match.group(0)  # a public address, or a version number shaped like one
    replaced.append(match.group(0))
    return "[private address]"


def redact_all(redactor: Redactor, files: Mapping[str, str]) -> tuple[dict[str, str], list[Finding]]:
    """Every file redacted, and what was taken out where (for the build's log)."""
    redacted: dict[str, str] = {}
    found: list[Finding] = []
    for path, text in files.items():
        redacted[path], kinds = redactor.redact(text)
        found += [Finding(path, kind) for kind in kinds]
    return redacted, found


def remaining(redactor: Redactor, files: Iterable[tuple[str, str]]) -> list[Finding]:
    return [finding for path, text in files for finding in redactor.findings(path, text)]
