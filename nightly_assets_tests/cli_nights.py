"""`nightly run` in a subprocess, as a release engineer's terminal or a scheduler starts it, on a
catalog whose benchmark stage sleeps (with a child process) so a test can act while it runs."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

from nightly_assets_tests.catalog_files import copy_catalog, pipeline_path

SLOW_BENCHMARK = """\
import json, subprocess, sys, time

# Sleeps `seconds`, or until the file `release` exists (a test that decides when it ends).
WAIT = (
    "import os, time\\n"
    "end = time.time() + {seconds}\\n"
    "while time.time() < end and not os.path.exists({release!r}):\\n"
    "    time.sleep(0.1)\\n"
)
# A child of the benchmark, in its process group: an interrupted night must end it too.
subprocess.Popen([sys.executable, "-c", WAIT, sys.argv[1]])
exec(WAIT)
with open(sys.argv[2], "w") as out:
    json.dump({{"benchmarks": [{{"name": "sleep", "value": {seconds}}}]}}, out)
"""


def start_night_with_a_slow_benchmark(
    tmp_path: Path,
    marker: str,
    *,
    seconds: int = 600,
    env: Mapping[str, str] | None = None,
    release: Path | None = None,
) -> subprocess.Popen[str]:
    """`nightly run demo` in a subprocess, on a catalog whose benchmark (and its child) sleeps
    `seconds`, or until the file `release` exists."""
    script = tmp_path / "slow_bench.py"
    script.write_text(SLOW_BENCHMARK.format(seconds=seconds, release=str(release or tmp_path / "never")))
    catalog = copy_catalog(tmp_path / "catalog")
    demo = pipeline_path(catalog, "demo")
    text = demo.read_text()
    benchmark = 'command: [python, -m, nightlysample.bench, --json, "{output}"]'
    assert benchmark in text
    demo.write_text(text.replace(benchmark, f'command: [python, {script}, {marker}, "{{output}}"]'))
    env = {**os.environ, "NIGHTLY_CATALOG_DIR": str(catalog), "PYTHONUNBUFFERED": "1", **(env or {})}
    return subprocess.Popen(
        [sys.executable, "-m", "nightly_assets.cli", "run", "demo", "--night", "2026-11-03"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )


def read_until(cli: subprocess.Popen[str], text: str) -> list[str]:
    """Read the CLI's output up to the first line containing `text`; the lines read."""
    assert cli.stdout is not None
    lines = []
    for line in cli.stdout:
        lines.append(line)
        if text in line:
            break
    return lines


def wait_for_the_benchmark(cli: subprocess.Popen[str], marker: str) -> list[str]:
    """Read the CLI's output until the benchmark stage runs with its child; the lines read."""
    lines = read_until(cli, "started  demo__benchmarks")
    deadline = time.monotonic() + 60
    while len(processes_with(marker)) < 2 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert len(processes_with(marker)) == 2, "".join(lines)
    return lines


def processes_with(marker: str) -> list[int]:
    found = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and marker in (proc / "cmdline").read_bytes().decode(errors="replace"):
                found.append(int(proc.name))
        except OSError:
            continue
    return found
