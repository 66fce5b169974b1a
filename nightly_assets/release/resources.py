"""Package indexes the night's wheels and sdists are published to.

`local` is a flat folder usable with `pip install --find-links` (the embedded default). Any other
name is a real index (PyPI, TestPyPI, pypiserver, a private one) reached with twine: every file is
validated with `twine check --strict`, uploaded with `twine upload`, and installed back from the
index into a scratch virtualenv, whose installed version must be the one built.

Credentials reach twine through its environment (TWINE_USERNAME / TWINE_PASSWORD), never its
command line; logs and error messages are cleaned of the password, and name the variable it is set
from, never its value.
"""

from __future__ import annotations

import hashlib
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from typing import TYPE_CHECKING, Annotated
from urllib.parse import unquote, urljoin, urlsplit

import dagster as dg
from packaging.tags import sys_tags
from packaging.utils import canonicalize_name, parse_sdist_filename, parse_wheel_filename
from packaging.version import Version
from pydantic import AfterValidator, ConfigDict, Field

from nightly_assets.process import CommandError, run_command
from nightly_assets.settings import FromEnv, PositiveSeconds, Seconds

if TYPE_CHECKING:  # requests on the first index call: loading the code location skips it
    import requests

LOCAL = "local"
TWINE_ENV = {
    # twine asks keyring for a password it lacks: no desktop keyring in a run.
    "PYTHON_KEYRING_BACKEND": "keyring.backends.null.Keyring",
    "COLUMNS": "200",  # its console wraps at 80 columns otherwise, splitting the lines parsed here
}
PYPI_TOKEN_USER = "__token__"  # noqa: S105  # the username of PyPI's (and TestPyPI's) API tokens


@dataclass(frozen=True)
class IndexVariables:
    """The NIGHTLY_* variables one named index is set from (`resources_for`)."""

    url: str
    simple_url: str
    username: str
    password: str

    def describe(self) -> str:
        return (
            f"{self.url} (the upload endpoint), {self.username} and {self.password}; "
            f"{self.simple_url} where pip reads it elsewhere (default: <url>/simple/)"
        )


# The deployment's indexes and their variables. `test` falls back to the local folder in the
# embedded default when its URL is unset; `production` never does.
INDEX_VARIABLES = {
    "test": IndexVariables(
        url="NIGHTLY_TEST_INDEX_URL",
        simple_url="NIGHTLY_TEST_INDEX_SIMPLE_URL",
        username="NIGHTLY_TEST_INDEX_USER",
        password="NIGHTLY_TEST_INDEX_PASSWORD",  # noqa: S106  # a name
    ),
    "production": IndexVariables(
        url="NIGHTLY_PROD_INDEX_URL",
        simple_url="NIGHTLY_PROD_INDEX_SIMPLE_URL",
        username="NIGHTLY_PROD_INDEX_USER",
        password="NIGHTLY_PROD_INDEX_PASSWORD",  # noqa: S106  # a name
    ),
}


class PublishError(RuntimeError):
    """Publishing to an index failed; the message names the index, its URL and what to do."""


class IndexNotConfigured(PublishError):
    """No index of that name in this deployment."""


class IndexUnreachable(PublishError):
    """The index does not answer (connection refused, DNS, timeout)."""


class CredentialsRefused(PublishError):
    """The index answered 401 or 403 to the upload."""


class DistributionInvalid(PublishError):
    """`twine check --strict` refused a file."""


def _http_url(url: str) -> str:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{url!r}: expected an http(s) URL")
    if parts.username or parts.password:
        # It would reach twine's command line, logs and metadata: credentials go in their fields.
        raise ValueError("expected a URL without credentials; set the username and password apart")
    return url


# Checked when the run reads the variable (FromEnv), not on its name.
HttpUrl = Annotated[str, AfterValidator(_http_url), FromEnv]


class PackageIndex(dg.Config):
    """One index twine uploads to and pip installs back from. Set `password` from an EnvVar
    (`resources_for` does), never inline: the run config then shows the variable's name only."""

    # A refused value is not repeated in the error: a URL may carry credentials by mistake.
    model_config = ConfigDict(hide_input_in_errors=True)

    url: HttpUrl = Field(
        description="twine's --repository-url: https://upload.pypi.org/legacy/, "
        "https://test.pypi.org/legacy/, http://host:port/ for pypiserver"
    )
    simple_url: HttpUrl | None = Field(
        default=None,
        description="the PEP 503 simple index pip installs from (TestPyPI: https://test.pypi.org/simple/); "
        "default <url>/simple/",
    )
    username: str = Field(default=PYPI_TOKEN_USER, description="__token__ for a PyPI API token")
    password: str | None = Field(
        default=None, description="the password or API token (an EnvVar)", repr=False
    )

    @property
    def index_url(self) -> str:
        return self.simple_url or self.url.rstrip("/") + "/simple/"


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
            _project(Path(f))[0] for f in self.uploaded + self.already_there
        ]
        return self.simple_url + (f"{projects[0]}/" if projects else "")


class PackageIndexesResource(dg.ConfigurableResource):
    """The package indexes by name: `local` (a find-links folder, one sub-folder per pipeline) and
    the real ones twine uploads to (`indexes`). A name in `local_names` is published to the folder:
    the embedded default puts `test` there when NIGHTLY_TEST_INDEX_URL is unset, so a laptop night
    runs end to end; `production` needs its variables (INDEX_VARIABLES) everywhere."""

    local_root: str = Field(description="the find-links folder of the `local` index")
    indexes: dict[str, PackageIndex] = Field(default_factory=dict, description="twine's indexes by name")
    local_names: list[str] = Field(
        default_factory=lambda: [LOCAL], description="index names published to the local folder"
    )
    timeout_s: int = Field(default=900, gt=0, description="per twine or pip command")
    http_timeout_s: PositiveSeconds = Field(default="30", description="per request to the simple index")
    listing_wait_s: Seconds = Field(
        default="120",
        description="how long to wait for the simple index to list an upload (PyPI's CDN lags)",
    )

    # -- which index ---------------------------------------------------------------------------

    def is_local(self, name: str) -> bool:
        return name in self.local_names and name not in self.indexes  # a configured index wins

    def is_configured(self, name: str) -> bool:
        return name in self.local_names or name in self.indexes

    def not_configured(self, name: str) -> str:
        """Why `name` cannot be published to, and which variables would configure it."""
        known = ", ".join(sorted({*self.local_names, *self.indexes}))
        variables = INDEX_VARIABLES.get(name)
        how = (
            f"set {variables.describe()}"
            if variables
            else f"name one of {', '.join([LOCAL, *INDEX_VARIABLES])} or add it to the resource's `indexes`"
        )
        return f"the package index '{name}' is not configured in this deployment (configured: {known}); {how}"

    def index(self, name: str) -> PackageIndex:
        if name not in self.indexes:
            raise IndexNotConfigured(self.not_configured(name))
        return self.indexes[name]

    # -- the local folder ----------------------------------------------------------------------

    def local_folder(self, pipeline: str) -> Path:
        return Path(self.local_root) / pipeline

    def publish_local(self, pipeline: str, files: list[Path]) -> list[Path]:
        """Copy `files` into the pipeline's folder of the local index."""
        dest = self.local_folder(pipeline)
        dest.mkdir(parents=True, exist_ok=True)
        published = []
        for file in files:
            target = dest / file.name
            tmp = target.with_suffix(target.suffix + ".part")
            shutil.copyfile(file, tmp)
            tmp.replace(target)  # never a half-copied wheel in the index
            published.append(target)
        return published

    # -- a real index, with twine --------------------------------------------------------------

    def publish(self, name: str, files: list[Path], workdir: Path) -> Publication:
        """Check, upload and install back `files` on the index `name`; logs go to `workdir`.
        A file the index already has with the same content (a re-run of the night) is not uploaded
        again; one it has with other content fails: a published file never changes."""
        upload = _Upload(name, self.index(name), self, workdir)
        return upload.run(files)


# -- one upload ------------------------------------------------------------------------------------


class _Upload:
    """The steps of one publish, with the index's settings and the secret to keep out of text."""

    def __init__(self, name: str, index: PackageIndex, settings: PackageIndexesResource, workdir: Path):
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
        listings = {project: self._listing(project) for project in {_project(f)[0] for f in files}}
        for file in files:
            listed = listings[_project(file)[0]].get(file.name)
            if listed is None:
                missing.append(file)
                continue
            ours = _sha256(file)
            theirs = listed.sha256 or self._download_sha256(listed.url)
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

    def _listing(self, project: str) -> dict[str, _Link]:
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
        return {link.filename: link for link in _links(response.url, response.text)}

    def _download_sha256(self, url: str) -> str:
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
                (*_project(f), parse_wheel_filename(f.name)[3]) for f in files if f.suffix == ".whl"
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


# -- helpers ---------------------------------------------------------------------------------------


def _twine(*args: str | Path) -> list[str | Path]:
    return [sys.executable, "-m", "twine", "--no-color", *args]


def _project(file: Path) -> tuple[str, Version]:
    """The canonical project name and the version of a wheel or sdist, from its file name."""
    try:
        if file.suffix == ".whl":
            name, version, _, _ = parse_wheel_filename(file.name)
        else:
            name, version = parse_sdist_filename(file.name)
    except ValueError as exc:
        raise PublishError(f"{file.name}: not a wheel or sdist file name: {exc}") from None
    return canonicalize_name(name), version


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        for chunk in iter(lambda: stream.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


@dataclass(frozen=True)
class _Link:
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


def _links(page_url: str, html: str) -> Iterable[_Link]:
    """The files of a PEP 503 project page, with the sha256 its `#sha256=` fragment gives."""
    parser = _AnchorParser()
    parser.feed(html)
    for href in parser.hrefs:
        url, _, fragment = urljoin(page_url, href).partition("#")
        algorithm, _, digest = fragment.partition("=")
        filename = unquote(urlsplit(url).path.rsplit("/", 1)[-1])
        yield _Link(filename, url, digest.lower() if algorithm == "sha256" and digest else None)


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
