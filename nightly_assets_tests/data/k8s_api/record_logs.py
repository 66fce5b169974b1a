"""How the pod logs under logs/ were recorded: the real entry script, run as a pod runs it (the Pipes
variables of a real session, `--report-files`, stdout and stderr in one stream), over a small AIU
suite (two tests pass, one is skipped), its lines stamped as the API's `timestamps=true`
gives them. Run it again (as root, it writes /opt/nightly/work) only when the entry script's messages
change: `python nightly_assets_tests/data/k8s_api/record_logs.py`.
"""

import datetime as dt
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import dagster as dg
from dagster._core.pipes.utils import PipesEnvContextInjector
from dagster_k8s.pipes import PipesK8sPodLogsMessageReader

from nightly_assets.containers import suite_entry
from nightly_assets.containers.recipes import WORKDIR

HERE = Path(__file__).parent
SUITE = """import pytest

pytestmark = pytest.mark.spyre_device


def test_matmul_on_the_card():
    assert sum(a * b for a, b in zip([1, 2], [3, 4])) == 11


def test_conv2d_matches_cpu():
    assert round(0.1 + 0.2, 6) == 0.3, "aiu result differs from the CPU reference"


@pytest.mark.skip(reason="needs two cards")
def test_allreduce():
    pass
"""
START = dt.datetime(2026, 11, 4, 4, 21, 7, 120000, tzinfo=dt.UTC)


def record() -> str:
    workdir = Path(WORKDIR)
    shutil.rmtree(workdir, ignore_errors=True)
    (workdir / "tests").mkdir(parents=True)
    (workdir / "tests" / "test_aiu.py").write_text(SUITE)
    (workdir / "pytest.ini").write_text("[pytest]\nmarkers =\n    spyre_device: needs a Spyre card\n")
    out = Path(tempfile.mkdtemp()) / "nightly-out"
    lines: list[str] = []

    @dg.asset
    def tests_device(context: dg.AssetExecutionContext) -> dg.MaterializeResult:
        with dg.open_pipes_session(
            context=context,
            context_injector=PipesEnvContextInjector(),
            message_reader=PipesK8sPodLogsMessageReader(),
        ) as session:
            command = [sys.executable, suite_entry.__file__, "--rootdir", WORKDIR, "--out", str(out)]
            command += ["--timeout", "3600.0", "--report-files", "--", "-m", "spyre_device", "tests"]
            done = subprocess.run(
                command,
                env={"PATH": "/usr/bin:/bin", **session.get_bootstrap_env_vars()},
                cwd=WORKDIR,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                check=True,
            )
            printed = done.stdout.replace(str(out), "/tmp/nightly-out").replace(
                sys.executable, "/usr/bin/python3"
            )
            lines.extend(printed.splitlines())
        return dg.MaterializeResult()

    dg.materialize([tests_device])
    shutil.rmtree(workdir)
    stamped = []
    for index, line in enumerate(lines):
        when = START + dt.timedelta(milliseconds=137 * index)
        stamped.append(f"{when.strftime('%Y-%m-%dT%H:%M:%S.%f')}123Z {line}")
    return "\n".join(stamped) + "\n"


if __name__ == "__main__":
    log = record()
    (HERE / "logs").mkdir(exist_ok=True)
    (HERE / "logs" / "succeeded.log").write_text(log)
    print(f"{len(log.splitlines())} lines recorded")
