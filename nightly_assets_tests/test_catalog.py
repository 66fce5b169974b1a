"""The catalog loads into typed models; a bad entry fails with its file, field and expectation."""

import shutil
from pathlib import Path

import dagster as dg
import pytest
import yaml

from nightly_assets.catalog.loader import BUILTIN_CATALOG_DIR, CatalogError, load_catalog


@pytest.fixture
def catalog_copy(tmp_path) -> Path:
    dest = tmp_path / "catalog"
    shutil.copytree(BUILTIN_CATALOG_DIR, dest, ignore=shutil.ignore_patterns("*.py", "__pycache__"))
    return dest


def edit(catalog: Path, pipeline: str, change) -> Path:
    path = catalog / "pipelines" / f"{pipeline}.yaml"
    document = yaml.safe_load(path.read_text())
    change(document)
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


def test_builtin_catalog_has_the_seed_values():
    catalog = load_catalog()
    assert set(catalog.pipelines) == {
        "demo",
        "jax_rocm_rbe",
        "jax_rocm_integration",
        "dynamo",
        "torch_spyre",
        "tpu",
        "tf_theta",
    }
    dynamo = catalog.pipelines["dynamo"]
    assert dynamo.cron == "0 8 * * *"
    unit = dynamo.stage("tests_unit").suite
    assert unit.markers == "unit and (nightly or post_merge or pre_merge)" and unit.timeout_minutes == 45
    assert dynamo.stage("tests_e2e_gpu_2").suite.timeout_minutes == 150
    assert dynamo.target("vllm-arm64").build_args["BASE_IMAGE_TAG"] == "25.06-cuda12.9-devel-ubuntu24.04"
    assert dynamo.stage("tests_unit").runner_for("arm64") == "cpu-arm-r8g-4xlarge"
    rbe = catalog.pipelines["jax_rocm_rbe"].stage("tests_multigpu").suite.bazel
    assert rbe.tag_filters == "gpu,cpu,-tpu,-config-cuda-only"
    assert catalog.pipelines["tpu"].thresholds.benchmark_slowdown == 1.2
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
        ("demo", lambda d: d["stages"][1].update(kind="compile"), "stages[1:wheels].kind: Input should be"),
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
            "exactly one of 'markers' or 'bazel'",
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
            "params.builder: expected one of pip, container, bazel, got 'make'",
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
            "params.bazel.workspace: Value error, '../elsewhere': expected a path inside the checkout",
        ),
        (
            "tf_theta",
            lambda d: d["stages"][1]["params"]["bazel"]["bootstrap"].update(repo="bazelisk"),
            "stage 'wheels' builds from unknown repository 'bazelisk'",
        ),
        (
            "jax_rocm_rbe",
            lambda d: d["stages"][1].update(params={}),
            "params.image: an image_pull stage names its image",
        ),
        (
            "tf_theta",
            lambda d: d["stages"][1]["params"].update(repo="tf"),
            "builds from unknown repository 'tf'",
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
    ],
)
def test_bad_pipeline_entry_names_file_field_and_expectation(catalog_copy, pipeline, change, expected):
    path = edit(catalog_copy, pipeline, change)
    with pytest.raises(CatalogError) as error:
        load_catalog(catalog_copy)
    assert str(error.value).startswith(str(path))
    assert expected in str(error.value)


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
    path = catalog_copy / "pipelines" / "tpu.yaml"
    path.write_text("name: tpu\nstages: [unclosed\n")
    with pytest.raises(CatalogError, match=rf"{path}: not valid YAML at line \d+, column \d+"):
        load_catalog(catalog_copy)


def test_document_must_be_a_mapping_and_match_its_file_name(catalog_copy):
    path = catalog_copy / "pipelines" / "tpu.yaml"
    path.write_text("- just\n- a list\n")
    with pytest.raises(CatalogError, match=rf"{path}: expected a mapping at the top level, got list"):
        load_catalog(catalog_copy)
    shutil.copy(catalog_copy / "pipelines" / "demo.yaml", path)
    with pytest.raises(CatalogError, match="name: 'demo' must match the file name 'tpu'"):
        load_catalog(catalog_copy)


def test_missing_patch_file_is_named(catalog_copy):
    (catalog_copy / "patches" / "demo" / "0001-nightly-marker-test.patch").unlink()
    with pytest.raises(CatalogError, match=r"repositories\.nightlysample\.patches: file 'patches/demo/0001"):
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
