"""The whole code location loads, and its graph keeps the rules every pipeline follows.

What the graph holds (every asset, its deps, kinds, tags, partitions and checks, every job, schedule
and sensor) is test_asset_snapshot.py's snapshot, data/asset_snapshot.yaml. Here: the invariants
(every asset has its group, kinds, description and night x target partitions; checks are partitioned
like their asset; each pipeline has its schedule, nightly and summary jobs; a schedule tick requests
one run per target), spot checks of the seeds' lineage, pools and gates, and that the prod
definitions load and their resources resolve.
"""

import datetime as dt

import dagster as dg
import pytest

from nightly_assets.definitions import build_definitions
from nightly_assets_tests.test_asset_snapshot import clean_nightly_env


@pytest.fixture(scope="module")
def defs(tmp_path_factory):
    with clean_nightly_env(tmp_path_factory.mktemp("definitions") / "nightly"):
        yield build_definitions()


@pytest.fixture(scope="module")
def graph(defs):
    return defs.resolve_asset_graph()


def test_lineage_reads_like_the_seed_diagram(graph):
    def parents(key: str) -> set[str]:
        node = graph.get(dg.AssetKey.from_user_string(key))
        return {p.to_user_string() for p in node.parent_keys}

    assert parents("demo/wheels") == {"demo/sources"}
    assert parents("demo/tests_unit") == {"demo/image"}
    assert parents("demo/release") == {"demo/night_summary", "demo/wheels"}
    assert parents("dynamo/runtime_image") == {"dynamo/framework_image"}
    assert parents("dynamo/tests_e2e_gpu_2") == {"dynamo/runtime_image"}
    assert parents("tf_theta/deploy") == {"tf_theta/sanity_job"}
    assert parents("torch_spyre/release") == {"torch_spyre/publish_test_index"}


def test_assets_have_group_kinds_description_and_partitions(defs, graph):
    for key in graph.get_all_asset_keys():
        node = graph.get(key)
        pipeline = key.path[0]
        assert node.group_name == pipeline
        assert node.description, key
        assert any(tag.startswith("dagster/kind/") for tag in node.tags), key
        dims = {d.name: d.partitions_def for d in node.partitions_def.partitions_defs}
        assert set(dims) == {"night", "target"}
        assert isinstance(dims["night"], dg.DailyPartitionsDefinition)
        assert dims["night"].timezone == "UTC"
        assert isinstance(dims["target"], dg.StaticPartitionsDefinition)
        assert dims["target"].get_partition_keys(), key
        # A night run of the pipeline's job materializes its stages for one night and one target.
        assert node.partitions_def == defs.resolve_job_def(f"{pipeline}_nightly").partitions_def, key


def test_checks_sit_where_the_gates_are(graph):
    checks = {(k.asset_key.to_user_string(), k.name) for k in graph.asset_check_keys}
    for key in graph.get_all_asset_keys():
        if graph.get(key).tags["nightly/stage_kind"] == "test_suite":
            assert (key.to_user_string(), "tests_passed") in checks
            assert (key.to_user_string(), "test_count_stable") in checks
    assert ("demo/wheels", "wheel_metadata_valid") in checks
    assert ("demo/perf_baseline", "benchmarks_within_baseline") in checks
    assert ("tpu/perf_baseline", "benchmarks_within_baseline") in checks
    assert ("torch_spyre/lint", "lint_clean") in checks
    blocking = {
        k.asset_key.to_user_string()
        for k in graph.asset_check_keys
        if graph.get_check_spec(k).blocking and k.name == "tests_passed"
    }
    assert "demo/tests_unit" in blocking


def test_gpu_suites_hold_the_gpu_pool(graph):
    assert graph.get(dg.AssetKey(["dynamo", "tests_e2e_gpu_1"])).pools == {"gpu"}
    assert graph.get(dg.AssetKey(["tpu", "tests_tpu"])).pools == {"tpu"}
    assert graph.get(dg.AssetKey(["jax_rocm_rbe", "wheels"])).pools == {"rbe"}


def test_a_suite_requires_only_the_resources_its_runners_use(graph):
    """A demo suite never asks for TPU or Bazel settings; a TPU suite never for a Docker host."""

    def used(key: str) -> set[str]:
        node = graph.get(dg.AssetKey.from_user_string(key))
        return set(node.assets_def.required_resource_keys) - {"io_manager"}

    assert used("demo/tests_unit") == {"artefacts", "warehouse", "test_runner", "docker_pool", "registries"}
    assert used("torch_spyre/tests_unit") == {"artefacts", "warehouse", "test_runner"}
    assert used("tpu/tests_tpu") == {"artefacts", "warehouse", "tpu_vms"}
    assert used("jax_rocm_rbe/tests_multigpu") == {"artefacts", "warehouse", "bazel_rbe"}


def test_every_pipeline_has_its_schedule_and_jobs(defs, graph):
    pipelines = {key.path[0] for key in graph.get_all_asset_keys()}
    assert {s.name for s in defs.schedules} == {f"{p}_schedule" for p in pipelines}
    for pipeline in pipelines:
        schedule = defs.resolve_schedule_def(f"{pipeline}_schedule")
        assert schedule.job_name == f"{pipeline}_nightly"
        assert schedule.execution_timezone == "UTC"
        nightly = defs.resolve_job_def(f"{pipeline}_nightly")
        assert {k.path[0] for k in nightly.asset_layer.selected_asset_keys} == {pipeline}
        summary = defs.resolve_job_def(f"{pipeline}_summary")
        assert summary.asset_layer.selected_asset_keys == {dg.AssetKey([pipeline, "night_summary"])}
    # Tier 3 of seed 003: the label sensor starts the PR job, an op job of its own.
    pr_job = defs.resolve_job_def("tpu_pr")
    assert [node.name for node in pr_job.nodes] == ["tpu_pr_tests"]
    assert defs.resolve_sensor_def("tpu_pr_label").job_name == "tpu_pr"


def test_schedule_requests_one_run_per_target_for_the_night_that_ended(defs, graph):
    targets = graph.get(dg.AssetKey(["dynamo", "sources"])).partitions_def.get_partitions_def_for_dimension(
        "target"
    )
    schedule = defs.resolve_schedule_def("dynamo_schedule")
    when = dt.datetime(2026, 11, 22, 8, 0, tzinfo=dt.UTC)
    with dg.build_schedule_context(
        scheduled_execution_time=when, repository_def=defs.get_repository_def()
    ) as context:
        requests = schedule.evaluate_tick(context).run_requests
    keys = targets.get_partition_keys()
    assert len(keys) == 6
    assert [r.partition_key for r in requests] == [f"2026-11-21|{t}" for t in keys]
    assert len({r.run_key for r in requests}) == len(keys)


def test_checks_are_evaluated_per_night_and_target(graph):
    """Partitioned checks: the UI's check history names the night each result judged."""
    for check_key in graph.asset_check_keys:
        spec = graph.get_check_spec(check_key)
        assert spec.partitions_def == graph.get(check_key.asset_key).partitions_def, check_key


def test_prod_definitions_load_and_their_resources_resolve(tmp_path):
    """NIGHTLY_ENV=prod: the code location loads with no secret set (they resolve per run), and with
    them set, the resources a run gets are Slack, the GCS artefact store and the warehouse URL."""
    from dagster_slack import SlackResource

    from nightly_assets.artefacts.resources import GcsArtefactStoreResource
    from nightly_assets.reporting.resources import SlackNotifierResource
    from nightly_assets.resources import resources_for

    with clean_nightly_env(tmp_path / "home", NIGHTLY_ENV="prod") as env:
        prod = build_definitions()
        assert all(s.default_status == dg.DefaultScheduleStatus.RUNNING for s in prod.schedules)
        prod.resolve_all_job_defs()

        env.setenv("NIGHTLY_WAREHOUSE_URL", f"sqlite:///{tmp_path}/w.sqlite")
        env.setenv("SLACK_BOT_TOKEN", "xoxb-test-token")
        env.setenv("NIGHTLY_ARTEFACTS_BUCKET", "nightly-artefacts")
        with dg.build_resources(resources_for("prod", tmp_path / "home")) as resources:
            assert isinstance(resources.notifier, SlackNotifierResource)
            assert isinstance(resources.notifier.slack, SlackResource)
            assert resources.notifier.slack.token == "xoxb-test-token"
            assert isinstance(resources.artefacts, GcsArtefactStoreResource)
            assert resources.artefacts.bucket == "nightly-artefacts"
            assert resources.warehouse.store().nights() == []
