"""Failure signatures: a failure's message with what varies between runs of the same failure
(numbers, addresses, paths, ids, hex, temp names) replaced by placeholders, the exception type and
the words kept, so that the tests a dead database or GPU failed on one night share one signature.
Pure Python (`testing/clusters.py` groups a suite-night's failures by it)."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Sequence

MAX_SIGNATURE = 200  # a signature names a failure, it does not reproduce a tensor dump
_SCAN = 2_000  # of the message: the exception line is near its end or its start

# Order matters: the larger patterns first (a URL holds a host:port, a path holds numbers).
_UUID = re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b", re.I)
_URL = re.compile(r"\b[a-z][a-z0-9+.-]*://[^\s'\"<>)\]]+", re.I)
_QUOTED_HOST = re.compile(r"\bhost=(['\"])[^'\"]*\1", re.I)
_IPV6 = re.compile(
    r"\[[0-9a-f:.%\w]*:[0-9a-f:.%\w]*\](?::\d+)?|(?<![\w:.])(?=[0-9a-f:]*:[0-9a-f:]*:)"
    r"(?:[0-9a-f]{0,4}:){2,7}[0-9a-f]{1,4}(?![\w:])",
    re.I,
)
_IPV4 = re.compile(r"(?<![\w.])\d{1,3}(?:\.\d{1,3}){3}(?::\d{1,5})?(?![\w.])")
_SOURCE = r"(?:py|pyx|c|cc|cpp|cu|cuh|h|hpp|java|go|rs|js|ts|so)"
# host:port (localhost:5432, db-3.ci.internal:5432), not file.cpp:1207 (a source file's line)
_HOST_PORT = re.compile(
    rf"(?<![\w./-])(?![\w-]+\.{_SOURCE}:)[a-z][\w-]*(?:\.[a-z][\w-]*)*:\d{{2,5}}(?![\w.])", re.I
)
_PATH = re.compile(
    r"(?<![\w<])(?:[a-z]:)?(?:~|\.{1,2})?(?:[/\\][\w.@+-]+){2,}[/\\]?|(?<![\w<])/[\w.@+-]+\b", re.I
)
_TEMP = re.compile(r"\b(?:tmp|temp|pytest-)[\w-]*\d[\w-]*", re.I)
_HEX = re.compile(r"\b0x[0-9a-f]+\b|\b(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{8,}\b", re.I)
_NUMBER = re.compile(r"(?<![\w<.])[-+]?\d+(?:\.\d+)*(?:e[-+]?\d+)?", re.I)
_RUNS = re.compile(r"<n>(?:\s*,\s*<n>)+")  # a shape or a tensor's values, whatever their length
_SPACE = re.compile(r"\s+")
_EXCEPTION_TYPE = re.compile(r"^[\w.]*(?:Error|Exception|Exit|Interrupt|Failure|Warning)\b:?")
_EXCEPTION_LINE = re.compile(r"^[\w.]*(?:Error|Exception|Exit|Interrupt|Failure|Warning)\b.*")

# Failures of what tests share rather than of the test: connections (a database, a licence or
# package server, the network), timeouts to a host, memory or disk, a lost device, the collective
# library or the driver. Matched on the signature, case-insensitively.
_INFRA = re.compile(
    r"connection (?:refused|reset|aborted|timed out)|could not connect|can'?t connect|failed to connect"
    r"|unable to connect|no route to host|network is unreachable|name or service not known"
    r"|temporary failure in name resolution|nodename nor servname|too many connections"
    r"|server closed the connection|broken pipe|remote end closed"
    r"|(?:connect|read)timeout|timed out.*(?:<addr>|<url>|host)|(?:<addr>|<url>|host).*timed out"
    r"|out of memory|outofmemoryerror|cannot allocate memory|no space left on device|disk quota exceeded"
    r"|\bnccl\b|\brccl\b|\bdriver\b|\becc\b|\bxid\b|nvml|device (?:is )?lost|gpu is lost|fallen off the bus"
    r"|no cuda-capable device|device not (?:found|available)|hardware error",
    re.I,
)
_RESOURCES = (  # what a message names as the resource, in this order
    re.compile(r"host=(['\"])(?P<host>[^'\"]+)\1,\s*port=(?P<port>\d+)", re.I),
    re.compile(r"server at (['\"])(?P<host>[^'\"]+)\1(?: \([^)]*\))?, port (?P<port>\d+)", re.I),
    re.compile(r"\[[0-9a-f:]+\]:\d+|(?<![\w.])\d{1,3}(?:\.\d{1,3}){3}:\d{1,5}(?![\w.])", re.I),
    re.compile(rf"(?<![\w./-])(?![\w-]+\.{_SOURCE}:)[a-z][\w-]*(?:\.[a-z][\w-]*)*:\d{{2,5}}(?![\w.])", re.I),
    re.compile(r"\b(?:cuda|xpu|hip|npu|tpu):\d+\b|\bGPU \d+\b|\bdevice \d+\b", re.I),
    re.compile(r"(?<=://)[^/\s'\"]+"),
)


def exception_line(message: str) -> str:
    """The line that says what failed: a traceback's last line, else the first exception line,
    else the first line (pytest's "E   " markers dropped)."""
    lines = [line.removeprefix("E ").strip() for line in message[-_SCAN:].splitlines()]
    lines = [line for line in lines if line]
    if not lines:
        return ""
    if "Traceback (most recent call last)" in message:
        return lines[-1]
    head = [line.removeprefix("E ").strip() for line in message[:_SCAN].splitlines() if line.strip()]
    return next((line for line in head if _EXCEPTION_LINE.match(line)), head[0] if head else lines[0])


def signature(message: str | None) -> str | None:
    """The message's signature (None for no message): its exception line, normalised."""
    if not message or not message.strip():
        return None
    text = exception_line(message)
    text = _UUID.sub("<id>", text)
    text = _URL.sub("<url>", text)
    text = _QUOTED_HOST.sub("host=<addr>", text)
    text = _IPV6.sub("<addr>", text)
    text = _IPV4.sub("<addr>", text)
    text = _HOST_PORT.sub("<addr>", text)
    text = _PATH.sub("<path>", text)
    text = _TEMP.sub("<tmp>", text)
    text = _HEX.sub("<hex>", text)
    text = _NUMBER.sub("<n>", text)
    text = _RUNS.sub("<n>, …", text)
    text = _SPACE.sub(" ", text).strip()
    return text[: MAX_SIGNATURE - 1] + "…" if len(text) > MAX_SIGNATURE else text


def is_known_infra(sig: str) -> bool:
    """Whether a signature names a failure of a shared resource (see _INFRA)."""
    return bool(_INFRA.search(sig))


def is_generic(sig: str) -> bool:
    """A signature that says nothing beyond a comparison of values ("assert <n> == <n>",
    "AssertionError"): independent failures share it by chance, so it is no sign of a shared cause."""
    body = _EXCEPTION_TYPE.sub("", sig, count=1)
    words = [w for w in re.findall(r"[A-Za-z_]\w+", body) if w.lower() != "assert"]
    return not words


def resource(message: str | None) -> str | None:
    """The resource a message names: a host:port, a host, a device; None when it names none."""
    if not message:
        return None
    text = exception_line(message)
    for pattern in _RESOURCES:
        found = pattern.search(text)
        if found:
            if "host" in pattern.groupindex:
                return f"{found['host']}:{found['port']}"
            return found.group(0)
    return None


def common_resource(messages: Iterable[str | None]) -> str | None:
    """The resource most of the messages name (ties: the first named)."""
    named = Counter(r for r in map(resource, messages) if r)
    return named.most_common(1)[0][0] if named else None


def grouped(failures: Iterable[tuple[str, str | None]]) -> list[tuple[str, list[str]]]:
    """(test, message) failures grouped by signature, the largest group first: (signature, tests).
    A failure without a message is left out (it has no signature)."""
    groups: dict[str, list[str]] = {}
    for test, message in failures:
        sig = signature(message)
        if sig is not None:
            groups.setdefault(sig, []).append(test)
    return sorted(groups.items(), key=lambda item: (-len(item[1]), item[0]))


def group_line(sig: str, tests: Sequence[str]) -> str:
    """ "23 tests: `ConnectionRefusedError: … <addr>`" (one test: named)."""
    return f"{len(tests)} tests: `{sig}`" if len(tests) > 1 else f"{tests[0]}: `{sig}`"
