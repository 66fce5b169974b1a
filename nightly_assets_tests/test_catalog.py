"""The catalog loads into typed models; a bad entry fails with its file, field and expectation."""

import shutil
from pathlib import Path

import dagster as dg
import pytest

from nightly_assets.catalog.loader import CatalogError, load_catalog
from nightly_assets_tests.catalog_files import copy_catalog, pipeline_path
from nightly_assets_tests.catalog_files import edit_pipeline as edit


@pytest.fixture
def catalog_copy(tmp_path) -> Path:
    return copy_catalog(tmp_path / "catalog")


def test_builtin_catalog_has_the_seed_values():
    catalog = load_catalog()
    assert set(catalog.pipelines) == {
        "demo",
        "demo_gpu",
        "jax_rocm_rbe",
        "jax_rocm_integration",
        "dynamo",
        "torch_spyre",
        "tpu",
        "tf_theta",
    }
    dynamo = catalog.pipelines["dynamo"]
    assert dynamo.cron == "0 8 * * *"
    assert dynamo.thresholds.summary_deadline_hours == 12  # the default
    assert dynamo.summary_deadline_cron() == "0 20 * * *"
    unit = dynamo.stage("tests_unit").suite
    assert unit.markers == "unit and (nightly or post_merge or pre_merge)" and unit.timeout_minutes == 45
    assert dynamo.stage("tests_e2e_gpu_2").suite.timeout_minutes == 150
    assert dynamo.target("vllm-arm64").build_args["BASE_IMAGE_TAG"] == "25.06-cuda12.9-devel-ubuntu24.04"
    assert dynamo.stage("tests_unit").runner_for("arm64") == "cpu-arm-r8g-4xlarge"
    rbe = catalog.pipelines["jax_rocm_rbe"].stage("tests_multigpu").suite.bazel
    assert rbe.tag_filters == "gpu,cpu,-tpu,-config-cuda-only"
    assert catalog.pipelines["tpu"].thresholds.regression_min_change == 0.03
    assert catalog.pipelines["torch_spyre"].thresholds.flaky_share_max == 0.05


@pytest.mark.parametrize(
    ("pipeline", "change", "expected"),
    [
        (
            "dynamo",
            lambda d: d["stages"][3]["suite"].pop("timeout_minutes"),
            "stages[3:tests_unit].suite.timeout_minutes: Field required",
        ),
        (
            "dynamo",
            lambda d: d["stages"][3]["suite"].update(timeout_minutes=-5),
            "stages[3:tests_unit].suite.timeout_minutes: Input should be greater than 0 (got -5)",
        ),
        ("dynamo", lambda d: d.update(cron="every night"), "cron: String should match pattern"),
        (  # the summary's deadline is the cron moved later: each run at a fixed minute and hour
            "dynamo",
            lambda d: d.update(cron="*/30 8 * * *"),
            "cron '*/30 8 * * *': expected a fixed minute (0-59), got '*/30'",
        ),
        (  # several runs a day are slots of every day (catalog/cadence.py)
            "dynamo",
            lambda d: d.update(cron="0 */6 * * 1-5"),
            "cron '0 */6 * * 1-5': a pipeline that runs several times a day runs every day",
        ),
        (
            "dynamo",
            lambda d: d.update(cron="0 20 * * 1-5"),
            "thresholds.summary_deadline_hours: a summary due past midnight needs a cron that runs every day",
        ),
        (
            "demo",
            lambda d: d["thresholds"].update(summary_deadline_hours=0),
            "thresholds.summary_deadline_hours: Input should be greater than or equal to 1 (got 0)",
        ),
        (
            "dynamo",
            lambda d: d["targets"].append({"name": "vllm-amd64"}),
            "targets: 'vllm-amd64' appears twice",
        ),
        (
            "demo",
            lambda d: d["stages"][1].update(deps=["nope"]),
            "stage 'wheels' depends on unknown stage 'nope'",
        ),
        (
            "demo",
            lambda d: d["stages"][1].update(kind="compile"),
            "stages[1:wheels].kind: expected one of analysis_report, batch_job",
        ),
        (
            "demo",
            lambda d: d["stages"][1].update(timout=3),
            "stages[1:wheels].timout: Extra inputs are not permitted",
        ),
        ("demo", lambda d: d["stages"][0].update(deps=["release"]), "stage dependencies form a cycle"),
        (
            "demo",
            lambda d: d["stages"][1].update(suite={"markers": "x", "timeout_minutes": 1, "runner": "local"}),
            "only 'test_suite' stages take a 'suite' block",
        ),
        (
            "demo",
            lambda d: d["stages"][3]["suite"].update(bazel={"targets": ["//..."]}),
            "a Bazel suite selects its tests by targets: no 'markers' or 'pytest_args'",
        ),
        (
            "demo",
            lambda d: d["stages"][2]["params"].update(packages=["freezegun>>1"]),
            "stages[2:image]: params.packages: 'freezegun>>1': expected a requirement like 'name>=1.0'",
        ),
        (
            "demo",
            lambda d: d["stages"][2]["params"].update(requirements=["../secrets.txt"]),
            "params.requirements: '../secrets.txt': expected a path relative to the checkout",
        ),
        ("demo", lambda d: d.update(start_date="yesterday"), "start_date: Input should be a valid date"),
        ("demo", lambda d: d.pop("repositories"), "repositories: Field required"),
        (
            "tpu",
            lambda d: d["targets"][0].update(repo_refs={"pytorch": "v1"}),
            "target 'v6e-1' pins unknown repository 'pytorch'",
        ),
        (
            "demo",
            lambda d: d["stages"][1]["params"].update(builder="make"),
            "stages[1:wheels]: params.builder: Input should be 'pip', 'container' or 'bazel' (got 'make')",
        ),
        (
            "demo",
            lambda d: d["stages"][1]["params"].update(bazel={"targets": ["//:w"]}),
            "params.bazel: a 'bazel' block goes with builder: bazel",
        ),
        (
            "tf_theta",
            lambda d: d["stages"][1]["params"]["bazel"].pop("targets"),
            "stages[1:wheels]: params.bazel.targets: Field required",
        ),
        (
            "tf_theta",
            lambda d: d["stages"][1]["params"]["bazel"].update(workspace="../elsewhere"),
            "stages[1:wheels]: params.bazel.workspace: '../elsewhere': expected a path inside the checkout",
        ),
        (
            "tf_theta",
            lambda d: d["stages"][1]["params"]["bazel"]["bootstrap"].update(repo="bazelisk"),
            "stage 'wheels' builds from unknown repository 'bazelisk'",
        ),
        (
            "jax_rocm_rbe",
            lambda d: d["stages"][1].update(params={}),
            "stages[1:build_image]: params.image: Field required",
        ),
        (
            "tf_theta",
            lambda d: d["stages"][1]["params"].update(repo="tf"),
            "builds from unknown repository 'tf'",
        ),
        (  # every key of a stage's params is typed: a typo fails when the catalog loads
            "demo",
            lambda d: d["stages"][1]["params"].update(sdsit=True),
            "defs.yaml: attributes.stages[1:wheels]: params.sdsit: Extra inputs are not permitted (got True)",
        ),
        (
            "dynamo",
            lambda d: d["stages"][2]["params"].update(role="base"),
            "stages[2:runtime_image]: params.role: Input should be 'framework' or 'runtime' (got 'base')",
        ),
        (
            "tf_theta",
            lambda d: d["stages"][2]["params"].update(walltime_minutes="ten"),
            "params.walltime_minutes: Input should be a valid number",
        ),
        (
            "tf_theta",
            lambda d: d["stages"][4]["params"]["grid"].update(nodes=[0]),
            "stages[4:benchmark_sweep]: params.grid: benchmark_sweep grid.nodes: 0 is not a positive integer",
        ),
        (  # the VM a TPU target makes is checked at load, not when the night creates it
            "tpu",
            lambda d: d["targets"][0]["params"].pop("zone"),
            "pipeline 'tpu' target 'v6e-1': params.zone must be a non-empty string, got None",
        ),
        (
            "tpu",
            lambda d: d["targets"][0]["params"].update(spot="yes"),
            "target 'v6e-1': params.spot must be true or false, got 'yes'",
        ),
        (  # the pool of VMs a sharded suite may hold at once
            "tpu",
            lambda d: d["targets"][0]["params"].update(max_vms=0),
            "target 'v6e-1': params.max_vms must be a whole number >= 1, got 0",
        ),
        (
            "tpu",
            lambda d: d["stages"][2].update(params={}),
            "stages[2:benchmarks]: params: a benchmarks stage takes exactly one of 'command' or 'from_stage'",
        ),
        (
            "tpu",
            lambda d: d["stages"][2]["params"].update(from_stage="perf_baseline"),
            "stage 'benchmarks' reads stage 'perf_baseline', which is not upstream of it",
        ),
        (  # ruff runs on this host: a lint stage cannot name a docker runner
            "torch_spyre",
            lambda d: d["stages"][1].update(runner="spyre-aiu"),
            "stage 'lint' (lint) cannot run on 'spyre-aiu' (kubernetes); expected a runner of kind local",
        ),
        (  # the container builder needs a Docker engine
            "demo",
            lambda d: d["stages"][1]["params"].update(builder="container"),
            "stage 'wheels' (wheels) cannot run on 'local' (local); expected a runner of kind docker",
        ),
        (  # VM settings pin a suite to a TPU VM
            "dynamo",
            lambda d: d["stages"][3].setdefault("params", {}).update(pip_args=["-q"]),
            "dynamo/defs.yaml: pipeline 'dynamo' stage 'tests_unit' (test_suite) cannot run on "
            "'gpu-l40-amd64' (docker); expected a runner of kind tpu_vm",
        ),
        (  # shards run where a runner holds many at once: not on Bazel remote execution
            "demo",
            lambda d: d["stages"][3]["suite"].update(shards=4, runner="rbe-rocm"),
            "stage 'tests_unit': suite.shards runs on runners of kind batch, docker, kubernetes, local, "
            "tpu_vm, not on 'rbe-rocm' (rbe); leave 'shards' and 'shard_minutes' out there",
        ),
        (
            "demo",
            lambda d: d["stages"][-2].update(runner="local"),
            "(night_summary) cannot run on 'local' (local); expected a runner of kind none",
        ),
        (
            "demo",  # a sample repository is made under NIGHTLY_HOME: never at a path of the YAML's choosing
            lambda d: d["repositories"][0].update(url="sample:/etc/nightly"),
            "repositories[0:nightlysample].url: expected sample:<name>, a plain name "
            "(letters, digits, . _ -) (got 'sample:/etc/nightly')",
        ),
        (
            "demo",
            lambda d: d["repositories"][0].update(url="sample:../../outside"),
            "expected sample:<name>, a plain name",
        ),
        (
            "tpu",
            lambda d: d["thresholds"].update(benchmark_slowdown=1.2),
            "benchmark_slowdown and baseline_nights were replaced by change-point detection: "
            "set regression_min_change",
        ),
        ("tpu", lambda d: d["thresholds"].update(regression_min_history=1), "regression_min_history"),
    ],
)
def test_bad_pipeline_entry_names_file_field_and_expectation(catalog_copy, pipeline, change, expected):
    path = edit(catalog_copy, pipeline, change)
    with pytest.raises(CatalogError) as error:
        load_catalog(catalog_copy)
    assert str(error.value).startswith(str(path))
    assert expected in str(error.value)


def test_a_sharded_suite_on_a_batch_runner_is_accepted(catalog_copy):
    """A batch runner runs a suite as Slurm jobs, a sharded one as a job array (runners/batch.py)."""
    environment = {"name": "environment", "kind": "environment", "deps": ["wheels"], "description": "Venv."}
    tests = {
        "name": "tests",
        "kind": "test_suite",
        "deps": ["environment"],
        "description": "The suite in four array tasks.",
        "suite": {"paths": ["tests"], "timeout_minutes": 30, "runner": "theta-cobalt", "shards": 4},
    }

    def add_suite(document: dict) -> None:
        document["stages"][2:2] = [environment, tests]  # after the wheels

    edit(catalog_copy, "tf_theta", add_suite)
    stage = load_catalog(catalog_copy).pipelines["tf_theta"].stage("tests")
    assert stage.suite is not None and stage.suite.shards == 4 and stage.runner_names() == ["theta-cobalt"]


def test_unknown_runner_names_the_stage_and_the_known_runners(catalog_copy):
    edit(
        catalog_copy,
        "dynamo",
        lambda d: d["stages"][3]["suite"].update(runner={"amd64": "gpu-h100", "arm64": "x"}),
    )
    with pytest.raises(
        CatalogError,
        match=r"stage 'tests_unit' uses unknown runner 'gpu-h100' \(runners.yaml "
        r"defines: .*gpu-l40-amd64",
    ):
        load_catalog(catalog_copy)


def test_runner_map_must_cover_every_target_arch(catalog_copy):
    edit(catalog_copy, "dynamo", lambda d: d["stages"][1].update(runner={"amd64": "cpu-amd-m5-4xlarge"}))
    with pytest.raises(CatalogError, match="stage 'framework_image' names no runner for target arch arm64"):
        load_catalog(catalog_copy)


def test_yaml_syntax_error_names_line_and_column(catalog_copy):
    path = pipeline_path(catalog_copy, "tpu")
    path.write_text("type: nightly_assets.catalog.component.NightlyPipeline\nattributes: [unclosed\n")
    with pytest.raises(CatalogError, match=rf"{path}: not valid YAML at line \d+, column \d+"):
        load_catalog(catalog_copy)


def test_document_must_be_a_mapping_and_match_its_folder_name(catalog_copy):
    path = pipeline_path(catalog_copy, "tpu")
    path.write_text("- just\n- a list\n")
    with pytest.raises(CatalogError, match=rf"{path}: expected a mapping at the top level, got list"):
        load_catalog(catalog_copy)
    shutil.copy(pipeline_path(catalog_copy, "demo"), path)
    with pytest.raises(
        CatalogError, match=rf"{path}: attributes.name: 'demo' must match the folder name 'tpu'"
    ):
        load_catalog(catalog_copy)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "type: nightly_assets.Other\nattributes: {}\n",
            "type: expected 'nightly_assets.catalog.component.Nig",
        ),
        (
            "type: nightly_assets.catalog.component.NightlyPipeline\n",
            "attributes: expected the pipeline's document (a mapping), got nothing",
        ),
        (
            "type: nightly_assets.catalog.component.NightlyPipeline\npost_processing: {}\nattributes: {}\n",
            "post_processing: not taken here",
        ),
    ],
)
def test_defs_yaml_names_its_component_type_and_attributes(catalog_copy, text, expected):
    path = pipeline_path(catalog_copy, "tpu")
    path.write_text(text)
    with pytest.raises(CatalogError) as error:
        load_catalog(catalog_copy)
    assert str(error.value).startswith(f"{path}: {expected}")


def test_catalog_layout_mistakes_are_named(catalog_copy):
    old = catalog_copy / "pipelines" / "tpu.yaml"
    old.parent.mkdir()
    pipeline_path(catalog_copy, "tpu").rename(old)
    with pytest.raises(
        CatalogError, match=r"pipelines: the catalog's old layout; each pipelines/<name>.yaml"
    ):
        load_catalog(catalog_copy)
    nested = catalog_copy / "team" / "tpu" / "defs.yaml"
    nested.parent.mkdir(parents=True)
    old.rename(nested)
    old.parent.rmdir()
    with pytest.raises(
        CatalogError, match=rf"{nested}: a pipeline is <catalog>/<name>/defs.yaml, one folder"
    ):
        load_catalog(catalog_copy)


def test_missing_patch_file_is_named(catalog_copy):
    (catalog_copy / "patches" / "demo" / "0001-nightly-marker-test.patch").unlink()
    with pytest.raises(
        CatalogError,
        match=r"demo/defs.yaml: attributes\.repositories\.nightlysample\.patches: file 'patches/",
    ):
        load_catalog(catalog_copy)


def test_bad_runner_entry(catalog_copy):
    path = catalog_copy / "runners.yaml"
    path.write_text(path.read_text().replace("kind: tpu_vm", "kind: quantum"))
    with pytest.raises(CatalogError, match=r"runners.yaml: runners.tpu-v6e.kind: Input should be"):
        load_catalog(catalog_copy)


def test_adding_a_target_is_a_yaml_edit(catalog_copy):
    from nightly_assets.definitions import build_definitions

    edit(
        catalog_copy,
        "dynamo",
        lambda d: d["targets"].append(
            {"name": "vllm-amd64-cu13", "arch": "amd64", "params": {"framework": "vllm"}}
        ),
    )
    graph = build_definitions(catalog_copy).resolve_asset_graph()
    partitions = graph.get(dg.AssetKey(["dynamo", "tests_unit"])).partitions_def
    targets = next(d.partitions_def for d in partitions.partitions_defs if d.name == "target")
    assert targets.get_partition_keys()[-1] == "vllm-amd64-cu13"
