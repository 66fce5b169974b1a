"""Run an external command the one way this project does: argument list, timeout, output to a log."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path


class CommandError(RuntimeError):
    """A command that could not start, timed out or (when asked) exited non-zero; says which and why."""


@dataclass(frozen=True)
class CommandResult:
    args: tuple[str, ...]
    returncode: int
    output: str
    log_path: Path | None

    def tail(self, lines: int = 30) -> str:
        return "\n".join(self.output.splitlines()[-lines:])


def run_command(
    args: Sequence[str | os.PathLike[str]],
    *,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    timeout_s: float = 3600,
    log_path: Path | None = None,
    check: bool = True,
) -> CommandResult:
    """Run `args` (never a shell string), capturing stdout+stderr into `log_path` when given."""
    argv = tuple(str(a) for a in args)
    full_env = {**os.environ, **(env or {})}
    try:
        proc = subprocess.run(
            argv,
            cwd=cwd,
            env=full_env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=timeout_s,
            check=False,
        )
    except FileNotFoundError as exc:
        raise CommandError(f"cannot run {argv[0]!r}: {exc.strerror}") from None
    except subprocess.TimeoutExpired as exc:
        partial = exc.output if isinstance(exc.output, str) else (exc.output or b"").decode(errors="replace")
        _write_log(log_path, partial)
        raise CommandError(
            f"{' '.join(argv[:4])} ... timed out after {timeout_s:.0f} s; last output:\n"
            + "\n".join(partial.splitlines()[-20:])
        ) from None
    _write_log(log_path, proc.stdout)
    result = CommandResult(argv, proc.returncode, proc.stdout, log_path)
    if check and proc.returncode != 0:
        raise CommandError(
            f"{' '.join(argv[:6])} exited with {proc.returncode}; last output:\n{result.tail()}"
        )
    return result


def _write_log(log_path: Path | None, text: str) -> None:
    if log_path is not None:
        log_path.parent.mkdir(parents=True, exist_ok=True)
        log_path.write_text(text)
