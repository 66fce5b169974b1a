"""How the pod logs under logs/ were recorded: the real entry script, run as a pod runs it (the Pipes
variables of a real session, `--report-files`, stdout and stderr in one stream), over a small AIU
suite (two tests pass, one is skipped), its lines stamped as the API's `timestamps=true`
gives them; and the same suite in 2 shards (logs/shards/): its collection in the image, then each
shard's pod as the planner splits the 3 collected tests with no history. Run it again (as root, it
writes /opt/nightly/work) only when the entry script's messages or the planner change:
`python nightly_assets_tests/data/k8s_api/record_logs.py`.
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


def record(pytest_args: list[str], collect_only: bool = False) -> str:
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
            command += ["--timeout", "3600.0", "--report-files"]
            command += [*(["--collect-only"] if collect_only else []), "--", *pytest_args]
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


SHARDS = 2


def collected_tests(log: str) -> list[str]:
    """The node ids the collect-only pod printed (its output.log, sent back as a Pipes file)."""
    import base64
    import gzip
    import json

    for line in log.splitlines():
        message = json.loads(line.partition(" ")[2])
        payload = message.get("params", {}).get("payload") or {}
        if payload.get("nightly_file") == "output.log":
            output = gzip.decompress(base64.b64decode(payload["gzip_base64"])).decode()
            return [t for t in output.splitlines() if "::" in t and not t.startswith(" ")]
    raise SystemExit("the collect-only pod sent back no output.log")


if __name__ == "__main__":
    from nightly_assets.catalog.models import Suite
    from nightly_assets.shards.suite import plan_suite

    (HERE / "logs" / "shards").mkdir(parents=True, exist_ok=True)
    log = record(["-m", "spyre_device", "tests"])
    (HERE / "logs" / "succeeded.log").write_text(log)
    print(f"{len(log.splitlines())} lines recorded")
    collection = record(["-m", "spyre_device", "tests"], collect_only=True)
    (HERE / "logs" / "shards" / "collect.log").write_text(collection)
    collected = collected_tests(collection)
    suite = Suite(markers="spyre_device", shards=SHARDS, timeout_minutes=60, runner="spyre-aiu", min_gpus=1)
    plan = plan_suite(suite, collected, {})
    for shard in plan.shards:
        shard_log = record([*shard.units, "-m", "spyre_device"])
        (HERE / "logs" / "shards" / f"shard-{shard.index}.log").write_text(shard_log)
        print(f"shard {shard.index}: {', '.join(shard.units)}")
