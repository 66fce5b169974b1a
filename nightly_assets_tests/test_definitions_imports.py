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
    "nightly_assets.site",  # the results site: Jinja, matplotlib, after a night's summary only
    "matplotlib",
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


def test_every_stage_kind_is_registered_under_its_own_name() -> None:
    from nightly_assets.stage_kinds import stage_kinds

    kinds = stage_kinds()
    assert {name: kind.name for name, kind in kinds.items()} == {name: name for name in kinds}
    assert {"test_suite", "test_health", "wheels"} <= set(kinds) and "spec" not in kinds


_ONE_PIPELINE = """
import json, sys
from nightly_assets.catalog.loader import load_catalog
from nightly_assets.stage_kinds import stage_kind
catalog = load_catalog(only=sys.argv[1])
kinds = sorted({s.kind for s in catalog.pipelines[sys.argv[1]].stages})
try:
    stage_kind("compile")
except KeyError as unknown:
    error = str(unknown)
loaded = sorted(m for m in sys.modules if m.startswith("nightly_assets.stage_kinds."))
print(json.dumps({"pipelines": sorted(catalog.pipelines), "kinds": kinds, "loaded": loaded, "error": error}))
"""


def test_loading_one_pipeline_imports_only_its_stage_kinds(tmp_path) -> None:
    """`nightly run` loads its pipeline alone: the other pipelines' kinds are never imported, and an
    unknown kind's error still lists every kind (named by their modules, not imported)."""
    from nightly_assets.stage_kinds import MODULE_OF_KIND

    clean = {k: v for k, v in os.environ.items() if not k.startswith("NIGHTLY_")}
    env = {**clean, "NIGHTLY_HOME": str(tmp_path), "DAGSTER_HOME": str(tmp_path / "dagster")}
    done = subprocess.run(
        [sys.executable, "-c", _ONE_PIPELINE, "demo"], env=env, capture_output=True, text=True, check=True
    )
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["pipelines"] == ["demo"]
    modules = {f"nightly_assets.stage_kinds.{MODULE_OF_KIND.get(k, k)}" for k in found["kinds"]}
    assert set(found["loaded"]) == modules | {"nightly_assets.stage_kinds.spec"}
    assert "nightly_assets.stage_kinds.batch_job" not in found["loaded"]  # another pipeline's kind
    assert found["error"].startswith("\"unknown stage kind 'compile'; expected one of: analysis_report,")
    assert "test_suite" in found["error"] and "wheels" in found["error"]


def test_a_pipeline_the_catalog_lacks_loads_the_whole_catalog(tmp_path) -> None:
    """So `nightly run nope` can name every pipeline there is."""
    from nightly_assets.catalog.loader import load_catalog

    assert len(load_catalog(only="nope").pipelines) == len(load_catalog().pipelines) > 1
