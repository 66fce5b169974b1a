"""One publish to a real package index, with twine: every file validated with `twine check
--strict`, uploaded with `twine upload` (unless the index has it with the same content already),
waited for until the simple index lists it, and installed back from the index into a scratch
virtualenv, whose installed version must be the one built.

Credentials reach twine through its environment (TWINE_USERNAME / TWINE_PASSWORD), never its
command line; logs and error messages are cleaned of the password, and name the variable it is set
from, never its value.
"""

from __future__ import annotations

import hashlib
import re
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from packaging.tags import sys_tags
from packaging.utils import parse_wheel_filename
from packaging.version import Version

from nightly_assets.process import CommandError, run_command
from nightly_assets.release.errors import (
    CredentialsRefused,
    DistributionInvalid,
    IndexUnreachable,
    PublishError,
)
from nightly_assets.release.indexes import INDEX_VARIABLES, PYPI_TOKEN_USER, PackageIndex
from nightly_assets.release.simple_index import IndexLink, file_sha256, project_links, project_of

if TYPE_CHECKING:  # requests on the first index call: loading the code location skips it
    import requests

TWINE_ENV = {
    # twine asks keyring for a password it lacks: no desktop keyring in a run.
    "PYTHON_KEYRING_BACKEND": "keyring.backends.null.Keyring",
    "COLUMNS": "200",  # its console wraps at 80 columns otherwise, splitting the lines parsed here
}


class UploadSettings(Protocol):
    """The resource's settings an upload reads (``PackageIndexesResource`` has them)."""

    @property
    def timeout_s(self) -> int: ...  # per twine or pip command
    @property
    def http_timeout_s(self) -> str: ...  # per request to the simple index
    @property
    def listing_wait_s(self) -> str: ...  # how long the simple index may take to list an upload


@dataclass(frozen=True)
class Publication:
    """What one publish did: the index's URLs (never credentials), the files uploaded, the ones
    the index already had with the same content, and the versions installed back."""

    index: str
    url: str
    simple_url: str
    uploaded: list[str]
    already_there: list[str]
    installed: dict[str, str]  # project -> version pip installed from the index
    logs: list[Path] = field(default_factory=list)

    def project_url(self) -> str:
        projects = sorted(self.installed) or [
            project_of(Path(f))[0] for f in self.uploaded + self.already_there
        ]
        return self.simple_url + (f"{projects[0]}/" if projects else "")


class Upload:
    """The steps of one publish, with the index's settings and the secret to keep out of text."""

    def __init__(self, name: str, index: PackageIndex, settings: UploadSettings, workdir: Path):
        self.name = name
        self.index = index
        self.settings = settings
        self.workdir = workdir
        self.variables = INDEX_VARIABLES.get(name)
        self.where = f"index '{name}' ({index.url})"
        self.logs: list[Path] = []

    def run(self, files: list[Path]) -> Publication:
        if not files:
            raise PublishError(f"{self.where}: nothing to publish (the wheels stage left no file)")
        missing = [str(f) for f in files if not f.is_file()]
        if missing:
            raise PublishError(f"{self.where}: no such file: {', '.join(missing)}")
        password = self._password()
        self._check(files)
        to_upload, already_there = self._compare(files)
        if to_upload:
            self._upload(to_upload, password)
            to_upload, already_there = self._after_upload(files, to_upload, already_there)
        installed = self._install_back(files)
        return Publication(
            index=self.name,
            url=self.index.url,
            simple_url=self.index.index_url,
            uploaded=[f.name for f in to_upload],
            already_there=[f.name for f in already_there],
            installed=installed,
            logs=self.logs,
        )

    def _password(self) -> str:
        if not self.index.password:
            variable = self.variables.password if self.variables else "its `password` field"
            raise PublishError(f"{self.where}: no password or API token to upload with: set {variable}")
        return self.index.password

    def _redact(self, text: str) -> str:
        return text.replace(self.index.password, "***") if self.index.password else text

    def _run(
        self, args: list[str | Path], log_name: str, env: dict[str, str] | None = None
    ) -> tuple[int, str]:
        """Run a command; its output, without the password and twine's colours, is its log."""
        try:
            # An empty HOME: no ~/.pypirc or pip config of the orchestrator's is read.
            result = run_command(
                args, env=env, timeout_s=self.settings.timeout_s, check=False, scratch_home=True
            )
        except CommandError as exc:
            raise PublishError(f"{self.where}: {self._redact(str(exc))}") from None
        output = self._redact(_plain(result.output))
        log = self.workdir / log_name
        log.parent.mkdir(parents=True, exist_ok=True)
        log.write_text(output)
        if output.strip():
            self.logs.append(log)
        return result.returncode, output

    def _check(self, files: list[Path]) -> None:
        code, output = self._run(_twine("check", "--strict", *files), "twine-check.log", TWINE_ENV)
        if code == 0:
            return
        refused = _check_failures(output)
        reasons = "; ".join(f"{file}: {reason}" for file, reason in refused.items()) or _tail(output)
        raise DistributionInvalid(
            f"twine check --strict refused {', '.join(refused) or 'the files'}: {reasons}"
        )

    def _upload(self, files: list[Path], password: str) -> None:
        env = {
            **TWINE_ENV,
            "TWINE_USERNAME": self.index.username,
            "TWINE_PASSWORD": password,
            "TWINE_NON_INTERACTIVE": "1",
        }
        args = _twine(
            "upload",
            "--non-interactive",
            "--disable-progress-bar",
            "--repository-url",
            self.index.url,
            *files,
        )
        code, output = self._run(args, "twine-upload.log", env)
        if code == 0:
            return
        status = _http_status(output)
        if status in (401, 403):
            who = (
                f"{self.variables.username} / {self.variables.password}"
                if self.variables
                else "the configured username and password"
            )
            raise CredentialsRefused(
                f"{self.where} refused the credentials (HTTP {status}): check {who} "
                f"(user '{self.index.username}'; a PyPI token goes with user {PYPI_TOKEN_USER})"
            )
        if status is None and _UNREACHABLE.search(output):
            raise IndexUnreachable(f"{self.where}: no answer to the upload: {_tail(output, 1)}")
        if status in (400, 409) and "exist" in output.lower():
            return  # uploaded meanwhile (a concurrent run): _after_upload compares the contents
        raise PublishError(f"{self.where}: twine upload exited with {code}: {_tail(output)}")

    def _after_upload(
        self, files: list[Path], uploaded: list[Path], already_there: list[Path]
    ) -> tuple[list[Path], list[Path]]:
        """Wait until the index lists every file with our content."""
        deadline = time.monotonic() + float(self.settings.listing_wait_s)
        while True:
            missing, _ = self._compare(files)
            if not missing:
                return uploaded, already_there
            if time.monotonic() >= deadline:
                raise PublishError(
                    f"{self.where}: uploaded, but {self.index.index_url} does not list "
                    f"{', '.join(f.name for f in missing)} after {float(self.settings.listing_wait_s):.0f} s"
                )
            time.sleep(2)

    def _compare(self, files: list[Path]) -> tuple[list[Path], list[Path]]:
        """The files the index lacks, and those it has with the same content; a file it has with
        other content is an error (a version's files are published once)."""
        missing, same = [], []
        listings = {project: self._listing(project) for project in {project_of(f)[0] for f in files}}
        for file in files:
            listed = listings[project_of(file)[0]].get(file.name)
            if listed is None:
                missing.append(file)
                continue
            ours = file_sha256(file)
            theirs = listed.sha256 or self._downloadfile_sha256(listed.url)
            if theirs != ours:
                raise PublishError(
                    f"{self.where} already has {file.name} with other content (sha256 {theirs[:12]}..., "
                    f"tonight's {ours[:12]}...): a published file never changes; give the build a new "
                    "version (a per-night one, e.g. .devYYYYMMDD)"
                )
            same.append(file)
        return missing, same

    def _get(self, url: str) -> requests.Response:
        import requests

        try:
            return requests.get(
                url, timeout=float(self.settings.http_timeout_s), headers={"Accept": "text/html"}
            )
        except requests.RequestException as exc:
            raise IndexUnreachable(f"{self.where}: {url} does not answer: {exc}") from None

    def _listing(self, project: str) -> dict[str, IndexLink]:
        """The files the simple index lists for `project`, by name ({} while it has none)."""
        url = f"{self.index.index_url.rstrip('/')}/{project}/"
        response = self._get(url)
        if response.status_code == 404:
            return {}
        if response.status_code != 200:
            raise PublishError(
                f"{self.where}: the simple index {url} answered {response.status_code} "
                "(the night installs back anonymously: the index must be readable without credentials)"
            )
        return {link.filename: link for link in project_links(response.url, response.text)}

    def _downloadfile_sha256(self, url: str) -> str:
        response = self._get(url)
        if response.status_code != 200:
            raise PublishError(f"{self.where}: {url} answered {response.status_code}")
        return hashlib.sha256(response.content).hexdigest()

    def _install_back(self, files: list[Path]) -> dict[str, str]:
        """Install the wheels this interpreter can run from the index into a scratch venv, without
        their dependencies; returns project -> installed version, each checked against the built one."""
        supported = set(sys_tags())
        wanted = {
            name: version
            for name, version, tags in (
                (*project_of(f), parse_wheel_filename(f.name)[3]) for f in files if f.suffix == ".whl"
            )
            if set(tags) & supported
        }
        if not wanted:
            return {}
        requirements = [f"{name}=={version}" for name, version in sorted(wanted.items())]
        with tempfile.TemporaryDirectory(prefix="nightly-install-back-") as scratch:
            venv = Path(scratch) / "venv"
            code, output = self._run([sys.executable, "-m", "venv", "--without-pip", venv], "venv.log")
            if code != 0:
                raise PublishError(f"{self.where}: could not create a scratch venv: {_tail(output)}")
            python = venv / "bin" / "python"
            args: list[str | Path] = [
                *(sys.executable, "-m", "pip", "--python", python, "install"),
                *("--isolated", "--no-cache-dir", "--disable-pip-version-check"),
                *("--no-deps", "--only-binary", ":all:", "--index-url", self.index.index_url),
                *requirements,
            ]
            code, output = self._run(args, "install-back.log")
            if code != 0:
                raise PublishError(
                    f"{self.where}: installing {' '.join(requirements)} back from {self.index.index_url} "
                    f"failed: {_tail(output)}"
                )
            probe = (
                "import importlib.metadata as m, sys; print('\\n'.join(m.version(n) for n in sys.argv[1:]))"
            )
            code, output = self._run([python, "-c", probe, *sorted(wanted)], "installed-versions.log")
        if code != 0:
            raise PublishError(f"{self.where}: the installed versions could not be read: {_tail(output)}")
        installed = dict(zip(sorted(wanted), output.split(), strict=False))
        for name, version in wanted.items():
            got = installed.get(name)
            if got is None or Version(got) != version:
                raise PublishError(
                    f"{self.where}: installing {name}=={version} back gave version {got or 'none'}"
                )
        return installed


def _twine(*args: str | Path) -> list[str | Path]:
    return [sys.executable, "-m", "twine", "--no-color", *args]


_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_UNREACHABLE = re.compile(
    r"ConnectionError|NewConnectionError|Max retries exceeded|NameResolutionError|"
    r"Failed to resolve|ConnectTimeout|ReadTimeout|Connection refused|Connection reset"
)


def _plain(text: str) -> str:
    """Output without terminal colours or the padding twine's console adds to each line."""
    return "\n".join(line.rstrip() for line in _ANSI.sub("", text).splitlines())


def _tail(text: str, lines: int = 12) -> str:
    return "\n".join([line for line in text.splitlines() if line.strip()][-lines:])


def _http_status(output: str) -> int | None:
    match = re.search(r"HTTPError: (\d{3}) ", output)
    return int(match[1]) if match else None


def _check_failures(output: str) -> dict[str, str]:
    """`twine check` output as file name -> its reasons, for the files that FAILED."""
    failures: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in output.splitlines():
        match = re.match(r"Checking (.+): (PASSED|FAILED)", line.strip())
        if match:
            current = failures.setdefault(Path(match[1]).name, []) if match[2] == "FAILED" else None
        elif current is not None and line.strip():
            current.append(re.sub(r"^(ERROR|WARNING)\s+", "", line.strip()))
    return {name: " ".join(reasons) or "no reason given" for name, reasons in failures.items()}
