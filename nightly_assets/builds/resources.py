"""Python builds on this machine: wheels and sdists with the project's own build backend, and fresh
environments with the night's wheels and the suite's test dependencies."""

from __future__ import annotations

import os
import sys
import sysconfig
from pathlib import Path

import dagster as dg

from nightly_assets.builds.framework_stack import STACK_PTH, FrameworkStack
from nightly_assets.builds.test_dependencies import TestDependencies
from nightly_assets.builds.toolchain import test_toolchain
from nightly_assets.process import CommandError, run_command

WHEELHOUSE_VAR = "NIGHTLY_WHEELHOUSE"
INDEX_URL_VAR = "NIGHTLY_PACKAGE_INDEX_URL"


class PackageSourceError(RuntimeError):
    """The configured package index or wheelhouse cannot be used; names the setting."""


class PythonBuildResource(dg.ConfigurableResource):
    """Builds a checkout with its own build backend in an isolated build environment (PEP 517,
    `python -m build`), and makes fresh environments. Build requirements, runtime dependencies and
    test dependencies come from the package index (`index_url`) and/or a folder of wheels
    (`wheelhouse`); with a wheelhouse and no index URL, from the wheelhouse only (offline). Neither
    the orchestrator's own packages nor this machine's pip configuration reach the night."""

    toolchain_dir: str
    index_url: str | None = None  # a PEP 503 simple index; unset: pip's default (PyPI)
    wheelhouse: str | None = None  # a folder of wheels (`pip --find-links`)
    build_timeout_s: int = 1800

    def build_wheels(self, src: Path, out: Path, log: Path, env: dict[str, str] | None = None) -> list[Path]:
        return self._build(src, out, log, "--wheel", "*.whl", env)

    def build_sdist(self, src: Path, out: Path, log: Path, env: dict[str, str] | None = None) -> list[Path]:
        return self._build(src, out, log, "--sdist", "*.tar.gz", env)

    def _build(
        self, src: Path, out: Path, log: Path, what: str, pattern: str, env: dict[str, str] | None
    ) -> list[Path]:
        """`python -m build` with `env` beside pip's settings (`PinnedRepo.build_env`: the
        commit's time as the archive's timestamps, so one commit always gives the same bytes)."""
        out.mkdir(parents=True, exist_ok=True)
        self._run(
            [sys.executable, "-m", "build", what, "--outdir", out, src],
            log,
            f"building {src.name} ({what[2:]})",
            env,
        )
        return sorted(out.glob(pattern))

    def create_environment(
        self,
        dest: Path,
        wheels: list[Path],
        log: Path,
        tests: TestDependencies | None = None,
        stack: FrameworkStack | None = None,
    ) -> Path:
        """A fresh virtual environment with `wheels` (their dependencies from the index) and the
        suite's test dependencies; returns its python. With a framework `stack`, the venv is made
        from the stack's Python and sees its packages after its own, so pip installs only what the
        stack lacks. Without test dependencies the suite runs with the stack's pytest, else the
        orchestrator's, linked in after the environment's own packages."""
        run_command(
            [stack.python if stack else sys.executable, "-m", "venv", "--without-pip", dest], timeout_s=300
        )
        python = dest / "bin" / "python"
        site = Path(
            run_command(
                [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], timeout_s=60
            ).output.strip()
        )
        if stack is not None:
            (site / STACK_PTH).write_text(stack.pth_lines())
        tests = tests or TestDependencies()
        install: list[str | Path] = [sys.executable, "-m", "pip", "--python", python, "install"]
        if wheels or tests:
            self._run(
                [*install, *self._wheel_links(wheels), *tests.pip_arguments([str(w) for w in wheels])],
                log,
                f"installing into {dest.name}",
            )
        if not tests:
            tools = test_toolchain(Path(self.toolchain_dir) / f"py{sysconfig.get_python_version()}")
            (site / "_nightly_test_toolchain.pth").write_text(f"{tools}\n")
        return python

    @staticmethod
    def _wheel_links(wheels: list[Path]) -> list[str | Path]:
        return ["--find-links", wheels[0].parent] if wheels else []

    def download(self, requirements: list[str], dest: Path, log: Path) -> None:
        """Fetch `requirements` (pip install arguments) and their dependencies as files into `dest`,
        for an image build that installs them offline."""
        self._run(
            [sys.executable, "-m", "pip", "download", "--dest", dest, *requirements],
            log,
            "fetching test dependencies",
        )

    def pip_env(self) -> dict[str, str]:
        """pip's settings for the night's builds and installs (build isolation runs pip too)."""
        env = {"PIP_CONFIG_FILE": os.devnull, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
        if self.wheelhouse:
            if not Path(self.wheelhouse).is_dir():
                raise PackageSourceError(
                    f"{WHEELHOUSE_VAR}={self.wheelhouse}: expected a folder of wheels (`make setup` "
                    "makes the repository's .wheelhouse, `nightly init` $NIGHTLY_HOME/wheelhouse)"
                )
            env["PIP_FIND_LINKS"] = self.wheelhouse
            if not self.index_url:
                env["PIP_NO_INDEX"] = "1"
        if self.index_url:
            env["PIP_INDEX_URL"] = self.index_url
        return env

    def package_sources(self) -> str:
        """Where packages come from, for error messages (never a URL's credentials)."""
        index = _without_credentials(self.index_url) if self.index_url else None
        if self.wheelhouse and not index:
            return (
                f"the wheelhouse {self.wheelhouse} only ({WHEELHOUSE_VAR}; set {INDEX_URL_VAR} for an index)"
            )
        sources = [f"index {index or 'PyPI (pip default)'}"]
        if self.wheelhouse:
            sources.append(f"wheelhouse {self.wheelhouse}")
        return " and ".join(sources)

    def _run(self, args: list[str | Path], log: Path, doing: str, env: dict[str, str] | None = None) -> None:
        try:
            run_command(
                args,
                env={**self.pip_env(), **(env or {})},
                timeout_s=self.build_timeout_s,
                log_path=log,
                scratch_home=True,
            )
        except CommandError as exc:
            raise CommandError(f"{doing} failed, packages from {self.package_sources()}: {exc}") from None


def _without_credentials(url: str) -> str:
    scheme, sep, rest = url.partition("://")
    return f"{scheme}{sep}{rest.rpartition('@')[2]}" if sep else url
