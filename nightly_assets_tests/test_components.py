"""The catalog as Dagster components: one NightlyPipeline per `<name>/defs.yaml`, which the `dg` CLI
checks (`dg check yaml`), lists (`dg list components`, `dg list defs`) and scaffolds
(`dg scaffold defs`), and which Dagster's own defs-folder loader builds as the code location does."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import types
from pathlib import Path

import dagster as dg
import pytest
import yaml
from jsonschema import Draft202012Validator

from nightly_assets.catalog.component import NightlyPipeline
from nightly_assets.catalog.loader import BUILTIN_CATALOG_DIR, COMPONENT_TYPE, CatalogError, load_catalog
from nightly_assets.definitions import build_definitions
from nightly_assets_tests.catalog_files import copy_catalog, edit_pipeline, pipeline_path

ROOT = Path(__file__).resolve().parents[1]
DG = Path(sys.executable).parent / "dg"


@pytest.fixture
def dg_env(dagster_home: Path) -> dict[str, str]:
    """`dg` as a developer runs it: telemetry off (its banner would land in --json output)."""
    dagster_home.mkdir(parents=True, exist_ok=True)
    (dagster_home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    return {**os.environ, "DAGSTER_HOME": str(dagster_home), "NO_COLOR": "1", "COLUMNS": "200"}


@pytest.fixture
def project_copy(tmp_path: Path, dg_env: dict[str, str]) -> tuple[Path, dict[str, str]]:
    """A copy of the project (pyproject.toml and the package) that `dg` may write to."""
    project = tmp_path / "project"
    project.mkdir()
    shutil.copy(ROOT / "pyproject.toml", project)
    package = project / "nightly_assets"
    shutil.copytree(ROOT / "nightly_assets", package, ignore=shutil.ignore_patterns("__pycache__"))
    return project, {**dg_env, "PYTHONPATH": str(project)}


def run_dg(cwd: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(DG), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300, check=False
    )


def test_the_component_type_is_the_one_defs_yaml_names():
    assert f"{NightlyPipeline.__module__}.{NightlyPipeline.__qualname__}" == COMPONENT_TYPE
    for path in sorted(BUILTIN_CATALOG_DIR.glob("*/defs.yaml")):
        assert path.read_text().splitlines()[0] == f"type: {COMPONENT_TYPE}", path


def test_dagsters_loader_builds_each_pipeline_as_the_code_location_does(nightly_home):
    """dg.load_from_defs_folder reads the same defs.yaml files into the same assets, jobs and
    schedules (the code location adds the cross-pipeline sensors, resources and executor)."""
    code_location = build_definitions()
    native = dg.Definitions.merge(
        dg.load_from_defs_folder(path_within_project=ROOT), dg.Definitions(resources=code_location.resources)
    )
    assert native.resolve_asset_graph().get_all_asset_keys() == (
        code_location.resolve_asset_graph().get_all_asset_keys()
    )
    for kind in ("jobs", "schedules"):
        names = [sorted(d.name for d in getattr(defs, kind) or []) for defs in (native, code_location)]
        assert names[0] == names[1], kind


def test_a_component_loaded_by_dagster_reports_the_catalogs_message(tmp_path, monkeypatch, nightly_home):
    """The same message, whether the code location's loader or Dagster's reads the file."""
    catalog = copy_catalog(tmp_path / "defs")
    path = edit_pipeline(catalog, "demo", lambda d: d["stages"][1]["params"].update(sdsit=True))
    expected = f"{path}: attributes.stages[1:wheels]: params.sdsit: Extra inputs are not permitted (got True)"
    with pytest.raises(CatalogError) as error:
        load_catalog(catalog)
    assert str(error.value) == expected

    defs_module = types.ModuleType("copied_defs")  # the copy as a defs module of its own
    defs_module.__file__ = str(catalog / "__init__.py")
    defs_module.__path__ = [str(catalog)]
    monkeypatch.setitem(sys.modules, defs_module.__name__, defs_module)
    tree = dg.ComponentTree.from_module(defs_module=defs_module, project_root=tmp_path)
    with pytest.raises(Exception) as native_error:  # Dagster wraps it in errors of its own
        tree.build_defs()
    assert expected in [str(e) for e in _chain(native_error.value)]


def _chain(error: BaseException | None):
    while error is not None:
        yield error
        error = error.__cause__ or error.__context__


def test_dg_check_yaml_passes_on_the_catalog_and_names_file_and_field_of_a_typo(project_copy):
    project, env = project_copy
    result = run_dg(project, env, "check", "yaml")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "All component YAML validated successfully." in result.stdout

    path = pipeline_path(project / "nightly_assets" / "defs", "demo")
    path.write_text(path.read_text().replace("\n  title: ", "\n  titel: "))
    # A folder per call: dg 1.13.27 keeps one defs.yaml per component type when it checks a whole
    # project (dagster_dg_core/check.py), so the folder is named; `dg check defs` loads them all.
    result = run_dg(project, env, "check", "yaml", str(path.parent))
    assert result.returncode == 1
    where = f"{path}:4 - {COMPONENT_TYPE} attributes.titel"
    assert f"{where} Additional properties are not allowed ('titel' was unexpected)" in result.stdout
    assert "'title' is a required property" in result.stdout

    # A misspelt `stages` and a stage param its kind does not take, or of the wrong value: each named
    # with its file and field (the schema types `params` by the stage's kind).
    text = path.read_text().replace("\n  titel: ", "\n  title: ").replace("\n  stages:", "\n  stagez:")
    path.write_text(text.replace("{repo: nightlysample, builder: pip}", "{repo: nightlysample, bilder: pip}"))
    result = run_dg(project, env, "check", "yaml", str(path.parent))
    assert result.returncode == 1
    assert "Additional properties are not allowed ('stagez' was unexpected)" in result.stdout
    assert "'stages' is a required property" in result.stdout
    path.write_text(text.replace("\n  stagez:", "\n  stages:").replace("builder: pip}", "builder: poetry}"))
    result = run_dg(project, env, "check", "yaml", str(path.parent))
    assert result.returncode == 1
    assert "'poetry' is not one of ['pip', 'container', 'bazel']" in result.stdout


def test_every_shipped_pipeline_meets_the_component_schema_and_bad_params_do_not():
    """What `dg check yaml <folder>` does for each folder (the whole-project run checks only one
    file per component type in dg 1.13.27), in one process: every shipped defs.yaml against the
    component's JSON schema, and a stage param its kind does not take refused."""
    schema = NightlyPipeline.get_model_cls().model_json_schema()
    validator = Draft202012Validator(schema)
    files = sorted((ROOT / "nightly_assets" / "defs").glob("*/defs.yaml"))
    assert len(files) >= 8
    for path in files:
        attributes = _as_dg_reads(path)
        assert [e.message for e in validator.iter_errors(attributes)] == [], path
    demo = _as_dg_reads(ROOT / "nightly_assets/defs/demo/defs.yaml")
    wheels = next(s for s in demo["stages"] if s["kind"] == "wheels")
    wheels["params"]["bilder"] = "pip"
    errors = [(list(e.absolute_path), e.message) for e in validator.iter_errors(demo)]
    index = demo["stages"].index(wheels)
    assert errors == [
        (["stages", index, "params"], "Additional properties are not allowed ('bilder' was unexpected)")
    ]
    wheels["kind"] = "wheelz"
    assert any("'wheelz' is not one of" in e.message for e in validator.iter_errors(demo))


def _as_dg_reads(path: Path) -> dict:
    """A defs.yaml's attributes as `dg check yaml` validates them: dates stay strings."""
    return json.loads(json.dumps(yaml.safe_load(path.read_text())["attributes"], default=str))


def test_a_catalog_without_runners_yaml_names_the_shipped_one(tmp_path):
    (tmp_path / "demo").mkdir()
    shutil.copy(ROOT / "nightly_assets/defs/demo/defs.yaml", tmp_path / "demo")
    with pytest.raises(CatalogError) as raised:
        load_catalog(tmp_path)
    shipped = ROOT / "nightly_assets" / "defs" / "runners.yaml"
    assert str(raised.value) == (
        f"{tmp_path / 'runners.yaml'}: file not found; a catalog's runners and pools live there: start "
        f"from the shipped one, {shipped} (copy it and keep the runners your pipelines name)"
    )


def test_dg_list_defs_lists_every_pipelines_assets_jobs_and_schedules(dg_env):
    result = run_dg(ROOT, {**dg_env, "PYTHONPATH": str(ROOT)}, "list", "defs", "--json")
    assert result.returncode == 0, result.stderr
    listed = json.loads(result.stdout)
    pipelines = set(load_catalog().pipelines)
    assert {a["asset_key"].split("/")[0] for a in listed["assets"]} == pipelines
    assert len(listed["assets"]) == len(build_definitions().resolve_asset_graph().get_all_asset_keys())
    assert {s["name"] for s in listed["schedules"]} == {f"{p}_schedule" for p in pipelines}
    assert {f"{p}_nightly" for p in pipelines} <= {j["name"] for j in listed["jobs"]}


def test_dg_scaffold_defs_writes_a_pipeline_that_loads(project_copy, nightly_home):
    project, env = project_copy
    listed = run_dg(project, env, "list", "components", "--json")
    assert listed.returncode == 0, listed.stderr
    assert COMPONENT_TYPE in {c["key"] for c in json.loads(listed.stdout)["items"]}

    result = run_dg(project, env, "scaffold", "defs", COMPONENT_TYPE, "gemm_nightly")
    assert result.returncode == 0, result.stdout + result.stderr
    catalog = project / "nightly_assets" / "defs"
    path = pipeline_path(catalog, "gemm_nightly")
    assert path.read_text().splitlines()[2:5] == [
        f"type: {COMPONENT_TYPE}",
        "attributes:",
        ("  name: gemm_nightly  # the folder's name; asset keys, jobs and the schedule are named after it"),
    ]
    checked = run_dg(project, env, "check", "yaml", str(path.parent))
    assert checked.returncode == 0, checked.stdout + checked.stderr

    pipeline = load_catalog(catalog).pipelines["gemm_nightly"]
    assert [s.kind for s in pipeline.stages] == ["sources", "test_suite", "night_summary"]
    graph = build_definitions(catalog).resolve_asset_graph()
    assert {k.to_user_string() for k in graph.get_all_asset_keys() if k.path[0] == "gemm_nightly"} == {
        "gemm_nightly/sources",
        "gemm_nightly/tests_unit",
        "gemm_nightly/night_summary",
    }
