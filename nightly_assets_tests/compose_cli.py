"""`docker-compose` (1.29) as the tests run it: the repository's compose files, an empty `.env`."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
COMPOSE_FILE = ROOT / "docker-compose.yml"


def run_compose(
    args: Sequence[str],
    env: Mapping[str, str],
    workdir: Path,
    files: Sequence[Path] = (COMPOSE_FILE,),
    project: str | None = None,
    timeout: int = 120,
) -> subprocess.CompletedProcess[str]:
    """`docker-compose -f FILE... ARGS` from the repository root, with only `env` (plus PATH, HOME
    and LANG) as its environment."""
    binary = shutil.which("docker-compose")
    if binary is None:
        pytest.fail("`docker-compose` is not installed: run `apt-get install docker-compose` (v1.29)")
    # An operator's .env next to the file must not leak in: point compose at an empty one.
    empty_env_file = workdir / "empty.env"
    empty_env_file.write_text("")
    base = {key: os.environ[key] for key in ("PATH", "HOME", "LANG") if key in os.environ}
    file_args = [arg for path in files for arg in ("-f", str(path))]
    project_args = ["-p", project] if project else []
    return subprocess.run(
        [binary, "--env-file", str(empty_env_file), *project_args, *file_args, *args],
        env={**base, **env},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
