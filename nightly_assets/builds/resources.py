"""Python builds on this machine: wheels and sdists from a checkout, and fresh environments."""

from __future__ import annotations

import sys
import sysconfig
from pathlib import Path

import dagster as dg

from nightly_assets.builds.toolchain import test_toolchain
from nightly_assets.process import run_command


class PythonBuildResource(dg.ConfigurableResource):
    """Builds with this interpreter, offline: no build isolation, no index."""

    toolchain_dir: str
    build_timeout_s: int = 1800

    def build_wheels(self, src: Path, out: Path, log: Path) -> list[Path]:
        out.mkdir(parents=True, exist_ok=True)
        run_command(
            [
                sys.executable,
                "-m",
                "pip",
                "wheel",
                "--no-deps",
                "--no-build-isolation",
                "--no-index",
                "--wheel-dir",
                out,
                src,
            ],
            timeout_s=self.build_timeout_s,
            log_path=log,
            scratch_home=True,  # the project's own build backend runs here
        )
        return sorted(out.glob("*.whl"))

    def build_sdist(self, src: Path, out: Path, log: Path) -> list[Path]:
        run_command(
            [sys.executable, "-m", "build", "--sdist", "--no-isolation", "--outdir", out, src],
            timeout_s=self.build_timeout_s,
            log_path=log,
            scratch_home=True,  # the project's own build backend runs here
        )
        return sorted(out.glob("*.tar.gz"))

    def create_environment(self, dest: Path, wheels: list[Path], log: Path) -> Path:
        """A fresh virtual environment with `wheels` installed from files only; returns its python."""
        run_command([sys.executable, "-m", "venv", "--without-pip", dest], timeout_s=300)
        python = dest / "bin" / "python"
        run_command(
            [
                sys.executable,
                "-m",
                "pip",
                "--python",
                python,
                "install",
                "--no-index",
                "--find-links",
                wheels[0].parent,
                *wheels,
            ],
            timeout_s=self.build_timeout_s,
            log_path=log,
        )
        site = run_command(
            [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], timeout_s=60
        ).output.strip()
        tools = test_toolchain(Path(self.toolchain_dir) / f"py{sysconfig.get_python_version()}")
        (Path(site) / "_nightly_test_toolchain.pth").write_text(f"{tools}\n")
        return python
