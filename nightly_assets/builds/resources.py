"""Python builds on this machine: wheels and sdists with the project's own build backend, and fresh
environments with the night's wheels and the suite's test dependencies."""

from __future__ import annotations

import os
import sys
import sysconfig
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import dagster as dg

from nightly_assets.builds.framework_stack import STACK_PTH, FrameworkStack
from nightly_assets.builds.installers import UV, Installer, choose_installer, uv_cause
from nightly_assets.builds.suite_dependencies import SuiteDependencies
from nightly_assets.builds.toolchain import test_toolchain
from nightly_assets.process import CommandError, cause, program_name, run_command

WHEELHOUSE_VAR = "NIGHTLY_WHEELHOUSE"
INDEX_URL_VAR = "NIGHTLY_PACKAGE_INDEX_URL"
PYPI = "https://pypi.org/simple"


class PackageSourceError(RuntimeError):
    """The configured package index or wheelhouse cannot be used; names the setting."""


@dataclass(frozen=True)
class _Sources:
    """One try's package sources: an index (None: the installer's default, PyPI) and/or wheels."""

    index_url: str | None
    wheelhouse: str | None

    @property
    def offline(self) -> bool:
        return bool(self.wheelhouse) and not self.index_url


class PythonBuildResource(dg.ConfigurableResource):
    """Builds a checkout with its own build backend in an isolated build environment (PEP 517:
    `uv build`, else `python -m build`), and makes fresh environments (uv, else pip: see
    `installers.py`). Build requirements, runtime dependencies and test dependencies come from the
    package index (`index_url`) and/or a folder of wheels (`wheelhouse`); with a wheelhouse and no
    index URL, from the wheelhouse only (offline), unless `fallback_index_url` is set: then what
    the wheelhouse lacks makes the command run again with that index too. Neither the
    orchestrator's own packages nor this machine's pip or uv configuration reach the night."""

    toolchain_dir: str
    index_url: str | None = None  # a PEP 503 simple index; unset: the installer's default (PyPI)
    wheelhouse: str | None = None  # a folder of wheels (`--find-links`)
    # Local mode's own wheelhouse (not one an operator named): a night it cannot serve takes PyPI too.
    fallback_index_url: str | None = None
    installer: str = UV  # or "pip"; uv falls back to pip where it cannot serve (`choose_installer`)
    uv_cache_dir: str | None = None  # kept between nights; unset: no cache (never the user's ~/.cache)
    build_timeout_s: int = 1800

    def build_wheels(self, src: Path, out: Path, log: Path, env: dict[str, str] | None = None) -> list[Path]:
        return self._build(src, out, log, "--wheel", "*.whl", env)

    def build_sdist(self, src: Path, out: Path, log: Path, env: dict[str, str] | None = None) -> list[Path]:
        return self._build(src, out, log, "--sdist", "*.tar.gz", env)

    def _build(
        self, src: Path, out: Path, log: Path, what: str, pattern: str, env: dict[str, str] | None
    ) -> list[Path]:
        """`uv build` (else `python -m build`, pip) with `env` beside the installer's settings
        (`PinnedRepo.build_env`: the commit's time as the archive's timestamps, so one commit always
        gives the same bytes). Either is the same PEP 517 build: the project's own backend in an
        isolated environment of this Python; uv makes and fills that environment in a fraction of
        pip's time."""
        out.mkdir(parents=True, exist_ok=True)
        installer = choose_installer(self.installer, stack_in_use=False)
        if installer.uv_binary:
            uv = installer.uv_binary
            # No [tool.uv.sources] (python -m build knows none); the backend's version in the log.
            args: list[str | Path] = [uv, "build", what, "--out-dir", out, "--python", sys.executable]
            args += ["--no-sources", src]
            self._run(
                lambda sources: (
                    [*args, *_uv_source_args(sources)],
                    {**self.uv_env(sources), "RUST_LOG": "uv_dispatch=debug", **(env or {})},
                ),
                log,
                f"building {src.name} ({what[2:]})",
                f"build: {installer.describe()} in an isolated environment",
                uv=True,
            )
        else:
            args = [sys.executable, "-m", "build", what, "--outdir", out, src]
            self._run(
                lambda sources: (args, {**self.pip_env(sources), **(env or {})}),
                log,
                f"building {src.name} ({what[2:]})",
                f"build: pip in an isolated environment ({installer.why})",
            )
        return sorted(out.glob(pattern))

    def installer_for(self, stack: FrameworkStack | None = None) -> Installer:
        """The installer `create_environment` uses for an environment on `stack` (or a plain one)."""
        return choose_installer(self.installer, stack_in_use=stack is not None)

    def create_environment(
        self,
        dest: Path,
        wheels: list[Path],
        log: Path,
        tests: SuiteDependencies | None = None,
        stack: FrameworkStack | None = None,
    ) -> Path:
        """A fresh virtual environment with `wheels` (their dependencies from the index) and the
        suite's test dependencies; returns its python. With a framework `stack`, the venv is made
        from the stack's Python and sees its packages after its own, so pip installs only what the
        stack lacks. Without test dependencies the suite runs with the stack's pytest, else the
        orchestrator's, linked in after the environment's own packages. The install log's first
        lines say which installer ran, why, and from which sources."""
        installer = self.installer_for(stack)
        base = stack.python if stack else sys.executable
        if installer.uv_binary:
            venv: list[str | Path] = [installer.uv_binary, "venv", "--quiet", "--no-project"]
            venv.append("--allow-existing")  # as `python -m venv`: a folder made before is kept
            run_command([*venv, "--python", base, dest], env=self.uv_env(), timeout_s=300, scratch_home=True)
        else:
            run_command([base, "-m", "venv", "--without-pip", dest], timeout_s=300)
        python = dest / "bin" / "python"
        if stack is not None:
            (_site_packages(python) / STACK_PTH).write_text(stack.pth_lines())
        tests = tests or SuiteDependencies()
        if wheels or tests:
            wanted = [*self._wheel_links(wheels), *tests.pip_arguments([str(w) for w in wheels])]
            self._run(
                lambda sources: self._install_command(installer, python, wanted, sources),
                log,
                f"installing into {dest.name}",
                f"installer: {installer.describe()}",
                uv=installer.uv_binary is not None,
            )
        if not tests:
            tools = test_toolchain(Path(self.toolchain_dir) / f"py{sysconfig.get_python_version()}")
            (_site_packages(python) / "_nightly_test_toolchain.pth").write_text(f"{tools}\n")
        return python

    def _install_command(
        self, installer: Installer, python: Path, wanted: list[str | Path], sources: _Sources
    ) -> tuple[list[str | Path], dict[str, str]]:
        if installer.uv_binary is None:
            pip: list[str | Path] = [sys.executable, "-m", "pip", "--python", python, "install"]
            return [*pip, *wanted], self.pip_env(sources)
        # Copies, as pip makes: a suite that edits an installed file must not change the cache.
        args: list[str | Path] = [installer.uv_binary, "pip", "install", "--python", python]
        args += ["--link-mode", "copy", *_uv_source_args(sources)]
        return [*args, *wanted], self.uv_env(sources)

    @staticmethod
    def _wheel_links(wheels: list[Path]) -> list[str | Path]:
        return ["--find-links", wheels[0].parent] if wheels else []

    def download(self, requirements: list[str], dest: Path, log: Path) -> None:
        """Fetch `requirements` (pip install arguments) and their dependencies as files into `dest`,
        for an image build that installs them offline (uv has no `pip download`)."""
        args: list[str | Path] = [sys.executable, "-m", "pip", "download", "--dest", dest, *requirements]
        self._run(lambda sources: (args, self.pip_env(sources)), log, "fetching test dependencies", "pip")

    def pip_env(self, sources: _Sources | None = None) -> dict[str, str]:
        """pip's settings for the night's builds and installs (build isolation runs pip too)."""
        sources = sources or self._attempts()[0]
        env = {"PIP_CONFIG_FILE": os.devnull, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
        if sources.wheelhouse:
            env["PIP_FIND_LINKS"] = sources.wheelhouse
            if sources.offline:
                env["PIP_NO_INDEX"] = "1"
        if sources.index_url:
            env["PIP_INDEX_URL"] = sources.index_url
        return env

    def uv_env(self, sources: _Sources | None = None) -> dict[str, str]:
        """uv's settings: no uv.toml or pyproject.toml of this machine, no Python downloads, the
        night's cache; the index by variable (credentials stay off the command line)."""
        env = {"UV_NO_CONFIG": "1", "UV_PYTHON_DOWNLOADS": "never", "NO_COLOR": "1"}
        env.update({"UV_CACHE_DIR": self.uv_cache_dir} if self.uv_cache_dir else {"UV_NO_CACHE": "1"})
        if sources and sources.index_url:
            env["UV_DEFAULT_INDEX"] = sources.index_url
        return env

    def _attempts(self) -> list[_Sources]:
        """The sources a command tries in turn: the configured ones, then, where local mode's own
        wheelhouse lacks a package, that wheelhouse with the fallback index."""
        if self.wheelhouse and not Path(self.wheelhouse).is_dir():
            raise PackageSourceError(
                f"{WHEELHOUSE_VAR}={self.wheelhouse}: expected a folder of wheels (`make setup` "
                "makes the repository's .wheelhouse, `nightly init` $NIGHTLY_HOME/wheelhouse)"
            )
        first = _Sources(self.index_url, self.wheelhouse)
        if first.offline and self.fallback_index_url:
            return [first, _Sources(self.fallback_index_url, self.wheelhouse)]
        return [first]

    def package_sources(self) -> str:
        """Where packages come from, for error messages (never a URL's credentials)."""
        index = _without_credentials(self.index_url) if self.index_url else None
        if self.wheelhouse and not index:
            if self.fallback_index_url:
                fallback = _without_credentials(self.fallback_index_url)
                return f"the wheelhouse {self.wheelhouse} first, then index {fallback} for what it lacks"
            return (
                f"the wheelhouse {self.wheelhouse} only ({WHEELHOUSE_VAR}; set {INDEX_URL_VAR} for an index)"
            )
        return _describe(_Sources(self.index_url, self.wheelhouse))

    def _run(
        self,
        command: Callable[[_Sources], tuple[list[str | Path], dict[str, str]]],
        log: Path,
        doing: str,
        header: str,
        uv: bool = False,
    ) -> None:
        """Run `command` with each try's sources until one succeeds; the log holds every try, its
        command line and sources, with no index credentials."""
        attempts = self._attempts()
        written = [header]
        try:
            for number, sources in enumerate(attempts, start=1):
                args, env = command(sources)
                # One try: its sources with the hint how to change them; more: this try's sources.
                where = self.package_sources() if len(attempts) == 1 else _describe(sources)
                written += [f"packages from: {_describe(sources)}", "$ " + " ".join(map(str, args))]
                try:
                    done = run_command(
                        args, env=env, timeout_s=self.build_timeout_s, check=False, scratch_home=True
                    )
                except CommandError as exc:  # could not start, or timed out
                    written.append(str(exc))
                    raise CommandError(
                        self._redact(f"{doing} failed, packages from {where}: {exc}")
                    ) from None
                written.append(done.output)
                if done.returncode == 0:
                    return
                reason = (uv_cause(done.output) if uv else None) or cause(done.output)
                failure = f"{program_name(done.args)} exited with {done.returncode}: {reason}"
                if number == len(attempts):
                    raise CommandError(
                        self._redact(
                            f"{doing} failed, packages from {where}: {failure}\nlast output:\n{done.tail()}"
                        )
                    )
                written.append(f"--- {failure}; again with the next package sources ---")
        finally:
            log.parent.mkdir(parents=True, exist_ok=True)
            log.write_text(self._redact("\n".join(written) + "\n"))

    def _redact(self, text: str) -> str:
        """`text` without the index URLs' user and password, however the tool printed them."""
        for url in (self.index_url, self.fallback_index_url):
            userinfo = urlsplit(url).netloc.rpartition("@")[0] if url else ""
            if userinfo:
                text = text.replace(userinfo + "@", "****@").replace(userinfo, "****")
        return text


def _uv_source_args(sources: _Sources) -> list[str | Path]:
    """The wheelhouse and offline flags of a uv command (uv has no variable for `--no-index`; the
    index itself goes by variable, `uv_env`)."""
    args: list[str | Path] = ["--find-links", sources.wheelhouse] if sources.wheelhouse else []
    return [*args, "--no-index"] if sources.offline else args


def _site_packages(python: Path) -> Path:
    """The environment's own site-packages, as its python names it (a stack's Python may be
    another version than the orchestrator's); asked only where a .pth goes there."""
    where = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    return Path(run_command([python, "-c", where], timeout_s=60).output.strip())


def _describe(sources: _Sources) -> str:
    index = _without_credentials(sources.index_url) if sources.index_url else None
    if sources.offline:
        return f"the wheelhouse {sources.wheelhouse} only"
    described = [f"index {index or 'PyPI (the installer default)'}"]
    if sources.wheelhouse:
        described.append(f"wheelhouse {sources.wheelhouse}")
    return " and ".join(described)


def _without_credentials(url: str) -> str:
    scheme, sep, rest = url.partition("://")
    return f"{scheme}{sep}{rest.rpartition('@')[2]}" if sep else url
