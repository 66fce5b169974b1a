"""What is wrong with a JUnit report file, said in one line that names it (``JUnitError``): missing,
empty, not JUnit (an HTML error page saved in its place), malformed XML or a forbidden construct."""

from __future__ import annotations

import re
from pathlib import Path

# defusedxml 0.7 ships no type hints (pyproject sets ignore_missing_imports), so these are Any.
import defusedxml.ElementTree as SafeET
from defusedxml.common import (
    DefusedXmlException,
    DTDForbidden,
    EntitiesForbidden,
    ExternalReferenceForbidden,
)

ROOT_TAGS = ("testsuites", "testsuite")  # the root elements a JUnit report may have
_ERROR_POSITION = re.compile(r": line \d+, column \d+$")
# A letter right after "<" skips the <?xml ...?> declaration and <!DOCTYPE ...>.
_FIRST_TAG = re.compile(rb"<([A-Za-z_][\w.:-]*)")
_SNIFF_BYTES = 4096


class JUnitError(ValueError):
    """A report file is missing or is not a usable JUnit report; the message names the file."""


def parse_error(path: Path, exc: SafeET.ParseError, seen_root: bool) -> JUnitError:
    """What is wrong with a file the parser broke off on: empty, not JUnit (an HTML error page
    saved in its place), or malformed XML at a line and column. `seen_root`: the parser had
    read the root element already."""
    if not seen_root:
        head = _head(path)
        if not head.strip() and _blank(path):
            return JUnitError(f"{path}: file is empty")
        # HTML error pages saved in place of a report are rarely well-formed XML; name them.
        first_tag = _FIRST_TAG.search(head)
        if first_tag and first_tag.group(1).decode("ascii") not in ROOT_TAGS:
            return not_junit(path, first_tag.group(1).decode("ascii"))
    line, column = exc.position
    reason = _ERROR_POSITION.sub("", str(exc))
    return JUnitError(f"{path}: malformed XML at line {line}, column {column}: {reason}")


def _head(path: Path) -> bytes:
    try:
        with path.open("rb") as source:
            return source.read(_SNIFF_BYTES)
    except OSError:
        return b""


def _blank(path: Path) -> bool:
    """Whether the file holds nothing but whitespace (read in chunks: it may be large)."""
    try:
        with path.open("rb") as source:
            while chunk := source.read(1 << 20):
                if chunk.strip():
                    return False
    except OSError:
        return False
    return True


def not_junit(path: Path, root_tag: str) -> JUnitError:
    return JUnitError(
        f"{path}: not a JUnit report: root element is <{root_tag}>, expected <testsuites> or <testsuite>"
    )


def forbidden_construct(exc: DefusedXmlException) -> str:
    if isinstance(exc, EntitiesForbidden):
        return "entity declaration"
    if isinstance(exc, ExternalReferenceForbidden):
        return "external reference"
    if isinstance(exc, DTDForbidden):
        return "document type declaration"
    return type(exc).__name__
