"""`nightly` imports only what the command asks for: checked in a fresh interpreter by the modules
it loaded, not by a clock (a loaded CI machine makes any start-up time pass or fail)."""

import json
import os
import subprocess
import sys

import pytest

# What `--help` must not load: the orchestrator and every SDK behind a resource.
HEAVY = ("dagster", "sqlalchemy", "google.cloud", "kubernetes", "docker", "paramiko", "pydantic")
# What a query (`status`, `tests`) must not load: dagster, the stage kinds the validated catalog
# imports, the code location, and the SDKs of resources it does not use.
NOT_FOR_QUERIES = (
    "dagster",
    "nightly_assets.stage_kinds",
    "nightly_assets.definitions",
    "nightly_assets.resources",
    "google.cloud.tpu_v2",
    "google.cloud.storage",
    "google.cloud.bigquery",
    "dagster_gcp",
    "kubernetes",
)

_LOADED = """
import json, sys
from nightly_assets.cli import main
try:
    code = main(sys.argv[1:])
except SystemExit as exc:
    code = exc.code
print(json.dumps({"code": code, "modules": sorted(sys.modules)}), file=sys.stderr)
"""


def loaded(argv: list[str], env: dict[str, str]) -> tuple[int, set[str]]:
    """Run `nightly argv` in a fresh interpreter: its exit status and the modules it imported."""
    done = subprocess.run(
        [sys.executable, "-c", _LOADED, *argv], env=env, capture_output=True, text=True, check=False
    )
    report = json.loads(done.stderr.strip().splitlines()[-1])
    return report["code"], set(report["modules"])


def _under(modules: set[str], package: str) -> bool:
    return any(m == package or m.startswith(package + ".") for m in modules)


@pytest.fixture
def env(tmp_path) -> dict[str, str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("NIGHTLY_")}
    return {**clean, "NIGHTLY_HOME": str(tmp_path), "DAGSTER_HOME": str(tmp_path / "dagster")}


@pytest.mark.parametrize("argv", [["--help"], ["tests", "--help"], ["tests", "rates", "--help"]])
def test_help_imports_neither_dagster_nor_any_sdk(env, argv):
    code, modules = loaded(argv, env)
    assert code == 0
    assert [name for name in HEAVY if _under(modules, name)] == []


@pytest.mark.parametrize("argv", [["status"], ["tests", "rates", "demo"]])
def test_queries_read_the_warehouse_without_the_code_location(env, argv):
    code, modules = loaded(argv, env)
    assert code == 0
    assert _under(modules, "sqlalchemy")  # it did query the warehouse
    assert [name for name in NOT_FOR_QUERIES if _under(modules, name)] == []


def test_a_gcs_bucket_loads_dagster_gcp_only_where_set(env):
    """The artefact store's cloud client comes with its setting, not with every resource set."""
    probe = "import sys; from nightly_assets.resources import resources_for; from pathlib import Path; "
    probe += "resources_for('local', Path(sys.argv[1])); print('dagster_gcp' in sys.modules)"
    argv = [sys.executable, "-c", probe, env["NIGHTLY_HOME"]]
    without = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
    bucket = {**env, "NIGHTLY_ARTEFACTS_BUCKET": "nightly-artefacts"}
    with_bucket = subprocess.run(argv, env=bucket, capture_output=True, text=True, check=False)
    assert (without.stdout.strip(), with_bucket.stdout.strip()) == ("False", "True"), (
        without.stderr + with_bucket.stderr
    )


def test_the_outline_names_what_the_validated_catalog_names():
    """`status` and `tests` read the outline: every shipped pipeline's name, title, targets and
    stages (in order) are the validated catalog's."""
    from nightly_assets.catalog.loader import load_catalog
    from nightly_assets.catalog.outline import load_outline

    catalog, outline = load_catalog(), load_outline()
    assert outline is not None
    assert list(outline.pipelines) == list(catalog.pipelines)
    for name, pipeline in catalog.pipelines.items():
        plain = outline.pipelines[name]
        assert (plain.title, [t.name for t in plain.targets], [s.name for s in plain.stages]) == (
            pipeline.title,
            [t.name for t in pipeline.targets],
            [s.name for s in pipeline.stages],
        )


def test_a_catalog_the_outline_cannot_read_is_told_as_the_loader_tells_it(env, tmp_path):
    from nightly_assets_tests.catalog_files import copy_catalog

    catalog = copy_catalog(tmp_path / "catalog")
    (catalog / "demo" / "defs.yaml").write_text("type: [unclosed\n")
    done = subprocess.run(
        [sys.executable, "-m", "nightly_assets.cli", "status"],
        env={**env, "NIGHTLY_CATALOG_DIR": str(catalog)},
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 2
    assert done.stderr.startswith(f"nightly: {catalog / 'demo' / 'defs.yaml'}: not valid YAML"), done.stderr
