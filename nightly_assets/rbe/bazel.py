"""What `bazel build` and `bazel test` (4.x) take and give back: the argument list, the private rc
file that carries credentials, the remote endpoint probe, the process summary, build events (test
verdicts, output files) and the testlogs tree."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import socket
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

# Bazel's exit codes: 0, 3 and 4 still leave a (possibly empty) report; 34 is a remote-side failure.
EXIT_PASSED = 0
EXIT_TESTS_FAILED = 3
EXIT_NO_TESTS = 4
EXIT_REMOTE_ERROR = 34
REPORT_EXIT_CODES = frozenset({EXIT_PASSED, EXIT_TESTS_FAILED, EXIT_NO_TESTS})
EXIT_MEANINGS = {
    1: "build failed",
    2: "bad command line or environment",
    8: "interrupted",
    9: "output base locked by another run",
    34: "remote execution or cache error",
    36: "local environment error",
    37: "Bazel crashed",
}
REDACTED = "***"
REMOTE_CACHE_HIT = "remote cache hit"

_PROCESS_SUMMARY = re.compile(r"^INFO: (\d+) process(?:es)?(?:: (.*?))?\.?$", re.MULTILINE)
_CONTROL_CHARS = re.compile(r"[\x00-\x1f\x7f]")
_OPTION = re.compile(r"--[A-Za-z][\w.-]*(=.*)?", re.DOTALL)
_KEPT_LOG = re.compile(r"test\.(xml|log)|attempt_\d+\.(xml|log)")
_RUN_DIR = re.compile(r"(?:^|_)run_\d+_of_(\d+)$")  # --runs_per_test's folder (after a shard's)
_DEFAULT_PORTS = {"grpcs": 443, "https": 443, "http": 80}
_GET_CAPABILITIES = "/build.bazel.remote.execution.v2.Capabilities/GetCapabilities"
_MIN_SECRET_WORD = 8


class BazelConfigError(ValueError):
    """A setting or a catalog entry Bazel cannot be given as it is; the message names it."""


# -- inputs ---------------------------------------------------------------------------------------


def checked_patterns(what: str, values: Sequence[str]) -> list[str]:
    """Target patterns or tag filters, passed to Bazel literally: shell characters are fine (there is
    no shell), control characters are not (they would split or hide a log line)."""
    for value in values:
        if not value.strip() or _CONTROL_CHARS.search(value):
            raise BazelConfigError(
                f"{what}: {value!r} is not a Bazel pattern, expected non-empty text without control chars"
            )
    return list(values)


def checked_options(what: str, values: Sequence[str]) -> list[str]:
    """Extra options from configuration: each one `--name` or `--name=value`, never a positional."""
    for value in values:
        if not _OPTION.fullmatch(value) or _CONTROL_CHARS.search(value):
            raise BazelConfigError(
                f"{what}: {value!r} is not a Bazel option, expected --name or --name=value"
            )
    return list(values)


@dataclass(frozen=True)
class Endpoint:
    """A remote executor or cache as Bazel takes it: grpc(s)://host:port or http(s)://host[:port]."""

    url: str
    scheme: str
    host: str
    port: int


def parse_endpoint(setting: str, url: str) -> Endpoint:
    text = url if "://" in url else f"grpcs://{url}"  # Bazel's default scheme
    split = urlsplit(text)
    expected = "expected grpc://host:port, grpcs://host[:port] or http(s)://host[:port]"
    if split.username or split.password:
        # The URL lands in argv and logs: credentials go in remote_header_envs instead.
        raise BazelConfigError(f"{setting}: the URL carries credentials; name them in remote_header_envs")
    try:
        port = split.port or _DEFAULT_PORTS.get(split.scheme)
    except ValueError:
        port = None
    if split.scheme not in ("grpc", "grpcs", "http", "https") or not split.hostname or port is None:
        raise BazelConfigError(f"{setting}={url!r}: {expected}")
    return Endpoint(url=url, scheme=split.scheme, host=split.hostname, port=port)


# -- the command line and the private rc file -----------------------------------------------------


def header_flag(name: str, value: str) -> str:
    if not name or _CONTROL_CHARS.search(name) or "=" in name:
        raise BazelConfigError(f"remote header name {name!r}: expected a header name without '=' or controls")
    if _CONTROL_CHARS.search(value):
        raise BazelConfigError(f"remote header {name!r}: its value holds control characters")
    return f"--remote_header={name}={value}"


def bazel_argv(
    bazel: str, startup: Sequence[str], command: str, options: Sequence[str], targets: Sequence[str]
) -> list[str]:
    """`--` ends the options: a target such as `--remote_cache=x` or `-//a:b` stays a target pattern."""
    return [bazel, *startup, command, *options, "--", *targets]


def write_private_bazelrc(path: Path, options: Sequence[str]) -> None:
    """Options Bazel reads for one run without them reaching any argv: mode 0600 in a 0700 folder.
    They are `build` options, which `bazel test` inherits."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    path.parent.chmod(0o700)
    lines = ["# written by nightly_assets for one Bazel command, removed after it"]
    # Bazel splits rc lines like a shell: quote each option so a value with spaces stays one option.
    lines += [f"build {shlex.quote(option)}" for option in options]
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)  # O_CREAT's mode does not apply to a file left by an earlier run
    with os.fdopen(fd, "w") as rc_file:
        rc_file.write("\n".join(lines) + "\n")


@dataclass(frozen=True)
class Redactor:
    """Replaces every secret in a text by ***."""

    secrets: tuple[str, ...] = ()

    @classmethod
    def of(cls, values: Iterable[str]) -> Redactor:
        # Also each long word and the shell-quoted form: "Bearer <token>" may be printed split or quoted.
        secrets: set[str] = set()
        for value in values:
            secrets.update({value, shlex.quote(value)})
            secrets.update(word for word in value.split() if len(word) >= _MIN_SECRET_WORD)
        return cls(tuple(sorted((s for s in secrets if s), key=len, reverse=True)))

    def __call__(self, text: str) -> str:
        for secret in self.secrets:
            text = text.replace(secret, REDACTED)
        return text


# -- the endpoint probe ---------------------------------------------------------------------------


def probe(
    endpoint: Endpoint, instance_name: str, timeout_s: float, root_certs: bytes | None = None
) -> str | None:
    """None when the endpoint answers, else why not. Any gRPC answer but UNAVAILABLE or
    DEADLINE_EXCEEDED counts: the server is up, and what it objects to is Bazel's to report."""
    try:
        with socket.create_connection((endpoint.host, endpoint.port), timeout=timeout_s):
            pass
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        return f"{endpoint.url} does not answer: no TCP connection within {timeout_s:g} s ({reason})"
    if endpoint.scheme not in ("grpc", "grpcs"):
        return None
    import grpc  # for a probe only: loading the code location does not need it

    target = f"{endpoint.host}:{endpoint.port}"
    channel = (
        grpc.insecure_channel(target)
        if endpoint.scheme == "grpc"
        else grpc.secure_channel(target, grpc.ssl_channel_credentials(root_certs))
    )
    with channel:
        get_capabilities = channel.unary_unary(_GET_CAPABILITIES)
        try:
            get_capabilities(_capabilities_request(instance_name), timeout=timeout_s, wait_for_ready=True)
        except grpc.RpcError as exc:
            if exc.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
                return f"{endpoint.url} does not answer gRPC within {timeout_s:g} s ({exc.code().name})"
    return None


def _capabilities_request(instance_name: str) -> bytes:
    """A serialised GetCapabilitiesRequest: field 1 (instance_name), length-delimited."""
    data = instance_name.encode()
    if not data:
        return b""
    length, size = bytearray(), len(data)
    while size > 0x7F:
        length.append(size & 0x7F | 0x80)
        size >>= 7
    length.append(size)
    return b"\x0a" + bytes(length) + data


# -- what Bazel writes back -----------------------------------------------------------------------


def process_counts(output: str) -> dict[str, int]:
    """Bazel's last `INFO: 16 processes: 6 remote cache hit, 6 internal, 4 linux-sandbox.` as
    {"total": 16, "remote cache hit": 6, "internal": 6, "linux-sandbox": 4}; {} when absent."""
    matches = list(_PROCESS_SUMMARY.finditer(output))
    if not matches:
        return {}
    total, detail = matches[-1].groups()
    counts = {"total": int(total)}
    for part in (detail or "").split(","):
        number, _, kind = part.strip().partition(" ")
        if number.isdigit() and kind:
            counts[kind] = counts.get(kind, 0) + int(number)
    return counts


def error_lines(output: str, limit: int = 3) -> str:
    """The first `ERROR:` lines of a Bazel log, for a one-line reason."""
    errors = [line for line in output.splitlines() if line.startswith("ERROR:")]
    return " / ".join(errors[:limit]) or "no ERROR line in the output"


@dataclass(frozen=True)
class TargetSummary:
    """One test target's verdict from the build event stream."""

    label: str
    status: str  # PASSED, FLAKY, FAILED, TIMEOUT, NO_STATUS, ...
    attempts: int


def _build_events(bep_file: Path) -> Iterator[dict[str, Any]]:
    """The events of a `--build_event_json_file` (none when Bazel wrote none)."""
    if not bep_file.is_file():
        return
    for number, line in enumerate(bep_file.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            yield json.loads(line)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{bep_file}: line {number} is not JSON ({exc.msg})") from None


def read_test_summaries(bep_file: Path) -> dict[str, TargetSummary]:
    """The `testSummary` events of a `--build_event_json_file`: the targets this run tested."""
    summaries: dict[str, TargetSummary] = {}
    for event in _build_events(bep_file):
        event_id = event.get("id", {}).get("testSummary")
        body = event.get("testSummary")
        if event_id is None or body is None:
            continue
        label = event_id["label"]
        summaries[label] = TargetSummary(
            label, body.get("overallStatus", "NO_STATUS"), int(body.get("totalRunCount", 0))
        )
    return summaries


def read_build_outputs(bep_file: Path, workspace: Path) -> dict[str, list[Path]]:
    """Each built target's default outputs (files inside an output folder included) on this machine,
    from the `targetCompleted` events and the `namedSetOfFiles` they point to: this run's only."""
    named_sets: dict[str, dict[str, Any]] = {}
    completed: dict[str, dict[str, Any]] = {}
    for event in _build_events(bep_file):
        event_id = event.get("id", {})
        if "namedSet" in event_id and "namedSetOfFiles" in event:
            named_sets[event_id["namedSet"]["id"]] = event["namedSetOfFiles"]
        elif "targetCompleted" in event_id and event.get("completed", {}).get("success"):
            completed[event_id["targetCompleted"]["label"]] = event["completed"]
    outputs: dict[str, list[Path]] = {}
    for label, body in completed.items():
        groups = [g for g in body.get("outputGroup", []) if g.get("name") == "default"]
        files: list[dict[str, Any]] = []
        pending = [fs["id"] for g in groups for fs in g.get("fileSets", [])]
        seen: set[str] = set()
        while pending:
            set_id = pending.pop()
            if set_id in seen or set_id not in named_sets:
                continue
            seen.add(set_id)
            files += named_sets[set_id].get("files", [])
            pending += [fs["id"] for fs in named_sets[set_id].get("fileSets", [])]
        if not groups:  # older events: the deprecated importantOutput list
            files = body.get("importantOutput", [])
        outputs[label] = sorted({_local_path(label, f, workspace) for f in files})
    return outputs


def _local_path(label: str, file: dict[str, Any], workspace: Path) -> Path:
    """A file:// URI is the path; with a remote cache or executor the URI is bytestream:// and the
    downloaded copy sits under the workspace's `bazel-out` link (pathPrefix starts with it)."""
    uri = str(file.get("uri", ""))
    name = str(file.get("name", ""))
    if uri.startswith("file://"):
        path = Path(unquote(urlsplit(uri).path))
    else:
        path = workspace.joinpath(*file.get("pathPrefix", []), name)
    if not path.is_file():
        raise ValueError(
            f"{label}: output {name!r} ({uri or 'no URI'}) is not on this machine at {path}: "
            "expected Bazel to download it (do not build wheels with --remote_download_minimal)"
        )
    return path


def label_dir(label: str) -> Path:
    """Where bazel-testlogs keeps a label: //pkg/sub:name -> pkg/sub/name, @r//p:n -> external/r/p/n."""
    repo, slashes, rest = label.partition("//")
    package, colon, name = rest.partition(":")
    if not colon:
        name = package.rsplit("/", 1)[-1]
    parts = [*(["external", repo.lstrip("@")] if repo.lstrip("@") else []), *package.split("/"), name]
    parts = [p for p in parts if p]
    if not slashes or not parts or any(p in (".", "..") for p in parts):
        raise ValueError(f"test label {label!r}: expected //package:name or @repo//package:name")
    return Path(*parts)


def collect_testlogs(testlogs: Path, labels: Iterable[str], dest: Path, runs_per_test: int = 1) -> Path:
    """Copy the reports and logs of `labels` into `dest` (replaced), laid out as bazel-testlogs: that
    tree also keeps earlier runs' targets, and Bazel replaces it on the next run. A target's folder
    also keeps what an earlier run with another --runs_per_test wrote (its run_<k>_of_<n> folders,
    or the plain test.xml beside them): only this run's layout is copied."""
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    for label in labels:
        relative = label_dir(label)
        source = testlogs / relative
        if not source.is_dir():
            continue
        for path in sorted(source.rglob("*")):
            inner = path.relative_to(source)
            if "test.outputs" in inner.parts or not _KEPT_LOG.fullmatch(path.name) or not path.is_file():
                continue
            run = _RUN_DIR.search(inner.parts[0]) if len(inner.parts) > 1 else None
            if (int(run.group(1)) if run else 1) != runs_per_test:
                continue
            target = dest / relative / inner
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target)
    return dest
