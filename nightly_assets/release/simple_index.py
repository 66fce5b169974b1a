"""What the files to publish are and what a PEP 503 simple index lists of them: a wheel's or sdist's
project and version from its file name, a file's sha256, and the files of a project page with the
sha256 each link's fragment gives."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urljoin, urlsplit

from packaging.utils import canonicalize_name, parse_sdist_filename, parse_wheel_filename
from packaging.version import Version

from nightly_assets.release.errors import PublishError


def project_of(file: Path) -> tuple[str, Version]:
    """The canonical project name and the version of a wheel or sdist, from its file name."""
    try:
        if file.suffix == ".whl":
            name, version, _, _ = parse_wheel_filename(file.name)
        else:
            name, version = parse_sdist_filename(file.name)
    except ValueError as exc:
        raise PublishError(f"{file.name}: not a wheel or sdist file name: {exc}") from None
    return canonicalize_name(name), version


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        for chunk in iter(lambda: stream.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


@dataclass(frozen=True)
class IndexLink:
    """A file a project page of the simple index links to, with the sha256 its link gives."""

    filename: str
    url: str
    sha256: str | None


class _AnchorParser(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.hrefs: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        href = dict(attrs).get("href")
        if tag == "a" and href:
            self.hrefs.append(href)


def project_links(page_url: str, html: str) -> Iterable[IndexLink]:
    """The files of a PEP 503 project page, with the sha256 its `#sha256=` fragment gives."""
    parser = _AnchorParser()
    parser.feed(html)
    for href in parser.hrefs:
        url, _, fragment = urljoin(page_url, href).partition("#")
        algorithm, _, digest = fragment.partition("=")
        filename = unquote(urlsplit(url).path.rsplit("/", 1)[-1])
        yield IndexLink(filename, url, digest.lower() if algorithm == "sha256" and digest else None)
