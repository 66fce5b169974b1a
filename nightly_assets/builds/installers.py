"""Which installer builds a night's wheels and fills its environments: uv where it can serve the
case, else pip, from the same package sources. uv makes and fills a venv (a build's isolated one
too) in a fraction of pip's time; pip stays for the framework stack (uv counts only a venv's own
site-packages as installed, so it would install again what the stack's .pth shows) and for a host
without the uv binary."""

from __future__ import annotations

import functools
import subprocess
from dataclasses import dataclass

UV = "uv"
PIP = "pip"
INSTALLERS = (UV, PIP)


@dataclass(frozen=True)
class Installer:
    name: str  # UV or PIP
    uv_binary: str | None  # set when name is UV
    why: str  # why this one: for pip, why not uv

    def describe(self) -> str:
        if self.uv_binary is None:
            return f"pip ({self.why})"
        return f"{uv_version(self.uv_binary)} ({self.why})"


def choose_installer(setting: str, stack_in_use: bool) -> Installer:
    """`setting` is the resource's `installer` (UV or PIP); uv only where it gives pip's result."""
    if setting not in INSTALLERS:
        raise ValueError(f"installer {setting!r}: expected one of {', '.join(map(repr, INSTALLERS))}")
    if setting == PIP:
        return Installer(PIP, None, "the builder's installer setting")
    if stack_in_use:
        return Installer(PIP, None, "a framework stack: uv would install again what the stack's .pth shows")
    binary = find_uv()
    if binary is None:
        return Installer(PIP, None, "no uv binary: the uv package is not installed with nightly_assets")
    return Installer(UV, binary, "the default")


def find_uv() -> str | None:
    """The uv binary the `uv` package installed beside the orchestrator; None where there is none."""
    try:
        import uv
    except ImportError:
        return None
    try:
        return str(uv.find_uv_bin())
    except FileNotFoundError:
        return None


@functools.cache
def uv_version(binary: str) -> str:
    """`uv 0.13.9`, for the install log and the stage's metadata."""
    done = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=30, check=False)
    return " ".join(done.stdout.split()[:2]) or f"uv at {binary}"


def uv_cause(output: str) -> str | None:
    """uv's reason for a failure, on one line: its `error:` line with the `cause:` lines under it
    (a resolution failure names the package and the sources it looked in there)."""
    lines = [line.strip() for line in output.splitlines()]
    errors = [i for i, line in enumerate(lines) if line.startswith("error:")]
    if not errors:
        return None
    first, *rest = lines[errors[-1] :]
    causes = [line.removeprefix("cause:").strip() for line in rest if line.startswith("cause:")]
    return ": ".join([first.removeprefix("error:").strip(), *causes])[:1000]
