"""Loading the code location imports the SDKs a run uses only when the run uses them: checked in a
fresh interpreter by the modules it loaded, not by a clock (`python -m benchmarks definitions_load`
times it)."""

import json
import os
import subprocess
import sys

import pytest

# Each of these cost tens to hundreds of milliseconds of every code-location load (and of every
# forked step) before they moved into the functions that call them.
RUN_TIME_ONLY = (
    "sqlalchemy",  # the warehouse store
    "google.api_core",  # the Cloud TPU API
    "google.cloud.tpu_v2",
    "grpc",  # the remote-execution probe
    "paramiko",  # SSH to TPU VMs; the Docker SDK loads it too
    "docker",  # the Docker SDK
    "dagster_docker",
    "requests",  # the GitHub, registry and package-index clients
    "nightly_assets.culprits.search",
    "nightly_assets.batch.report",
)

_LOADED = """
import json, sys
from nightly_assets.definitions import defs
defs.resolve_asset_graph()
print(json.dumps(sorted(sys.modules)), file=sys.stderr)
"""


def _under(modules: set[str], package: str) -> bool:
    return any(m == package or m.startswith(package + ".") for m in modules)


@pytest.fixture(scope="module")
def loaded_modules(tmp_path_factory) -> set[str]:
    home = tmp_path_factory.mktemp("home")
    clean = {k: v for k, v in os.environ.items() if not k.startswith("NIGHTLY_")}
    env = {**clean, "NIGHTLY_HOME": str(home), "DAGSTER_HOME": str(home / "dagster")}
    done = subprocess.run(
        [sys.executable, "-c", _LOADED], env=env, capture_output=True, text=True, check=True
    )
    return set(json.loads(done.stderr.strip().splitlines()[-1]))


def test_the_definitions_load_with_the_resources_and_stage_kinds_they_need(loaded_modules):
    # The probe itself: a load that imported nothing of ours would pass the test below.
    for needed in ("nightly_assets.resources", "nightly_assets.stage_kinds.suite", "dagster_slack"):
        assert needed in loaded_modules, needed


@pytest.mark.parametrize("package", RUN_TIME_ONLY)
def test_loading_the_definitions_leaves_run_time_sdks_unimported(loaded_modules, package):
    loaded = sorted(m for m in loaded_modules if m == package or m.startswith(package + "."))
    assert not _under(loaded_modules, package), f"loading the definitions imported {loaded[:5]}"
