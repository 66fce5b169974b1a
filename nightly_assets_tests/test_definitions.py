"""The whole code location loads, and its graph keeps the rules every pipeline follows.

What the graph holds (every asset, its deps, kinds, tags, partitions and checks, every job, schedule
and sensor) is test_asset_snapshot.py's snapshot, data/asset_snapshot.yaml. Here: the invariants
(every asset has its group, kinds, description and night x target partitions; checks are partitioned
like their asset; each pipeline has its schedule, nightly and summary jobs; a schedule tick requests
one run per target), spot checks of the seeds' lineage, pools and gates, and that the prod
definitions load and their resources resolve.
"""

import datetime as dt
import re
from pathlib import Path

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
    assert parents("demo_gpu/environment") == {"demo_gpu/wheels"}
    assert parents("demo_gpu/tests_gpu_1") == {"demo_gpu/environment"}
    assert parents("demo_gpu/perf_baseline") == {"demo_gpu/benchmarks"}
    assert parents("dynamo/runtime_image") == {"dynamo/framework_image"}
    assert parents("dynamo/tests_e2e_gpu_2") == {"dynamo/runtime_image"}
    assert parents("tf_theta/deploy") == {"tf_theta/sanity_job"}
    assert parents("torch_spyre/release") == {"torch_spyre/publish_test_index"}
    # torch_spyre's gates sit between its suites and the summary that publishing waits for.
    assert parents("torch_spyre/flaky_tests") == {
        "torch_spyre/tests_unit",
        "torch_spyre/tests_device",
        "torch_spyre/tests_pytorch_in_scope",
    }
    assert parents("torch_spyre/night_summary") == {"torch_spyre/flaky_tests"}


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
    assert ("demo/perf_baseline", "no_new_regression") in checks
    assert ("tpu/perf_baseline", "no_new_regression") in checks
    assert ("torch_spyre/lint", "lint_clean") in checks
    for check in ("flaky_share_within_limit", "in_scope_share_reached", "no_new_broken_test"):
        assert ("torch_spyre/flaky_tests", check) in checks
    assert ("demo/flaky_tests", "flaky_share_within_limit") in checks
    assert ("demo/flaky_tests", "in_scope_share_reached") not in checks  # no in-scope suite named
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
        # the summary, and the test health that reads the warehouse only (judged on failed nights too)
        health = (
            {dg.AssetKey([pipeline, "flaky_tests"])}
            if pipeline in ("demo", "torch_spyre", "jax_rocm_rbe")
            else set()
        )
        assert summary.asset_layer.selected_asset_keys == {dg.AssetKey([pipeline, "night_summary"]), *health}
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


def test_night_summaries_are_due_twelve_hours_after_their_schedule_tick(graph):
    """Each summary's freshness policy: Dagster's freshness daemon shows the asset stale in the UI
    once a tick's summary is late (the `missing_night_alerts` sensor alerts per night)."""
    policies = {
        key.to_user_string(): graph.get(key).freshness_policy
        for key in graph.get_all_asset_keys()
        if graph.get(key).freshness_policy is not None
    }
    pipelines = {key.path[0] for key in graph.get_all_asset_keys()}
    assert set(policies) == {f"{p}/night_summary" for p in pipelines}
    twelve_hours = dt.timedelta(hours=12)
    assert policies["demo/night_summary"] == dg.FreshnessPolicy.cron("0 15 * * *", twelve_hours)  # 0 3 * * *
    assert policies["dynamo/night_summary"] == dg.FreshnessPolicy.cron("0 20 * * *", twelve_hours)  # 0 8
    assert policies["jax_rocm_rbe/night_summary"] == dg.FreshnessPolicy.cron("0 14 * * *", twelve_hours)


def test_checks_are_evaluated_per_night_and_target(graph):
    """Partitioned checks: the UI's check history names the night each result judged."""
    for check_key in graph.asset_check_keys:
        spec = graph.get_check_spec(check_key)
        assert spec.partitions_def == graph.get(check_key.asset_key).partitions_def, check_key


def test_prod_definitions_load_and_their_resources_resolve(tmp_path):
    """NIGHTLY_ENV=prod: the code location loads with no secret set (they resolve per run), and with
    them set, the resources a run gets are Slack, the GCS artefact store and the warehouse URL."""
    from dagster_slack import SlackResource

    from nightly_assets.artefacts.gcs import GcsArtefactStoreResource
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


# -- settings: NIGHTLY_* variables reach the resources as dg.EnvVar --------------------------------

# Distinctive values: none of them may show up in the resources' config, only the variables' names.
SETTINGS = {
    "NIGHTLY_BATCH_KIND": "slurm",
    "NIGHTLY_BATCH_POLL_S": "7.25",
    "NIGHTLY_TPU_SSH_PORT": "2222",
    "NIGHTLY_TPU_QUEUED": "true",
    "NIGHTLY_REGISTRY_ACR_URL": "https://acr.example:5443",
    "NIGHTLY_REGISTRY_ACR_AUTH": "ecr",
    "NIGHTLY_BASE_IMAGE_ARM64": "arm64-base/python:probe",
    "NIGHTLY_BAZEL_MAX_IDLE_SECS": "4321",
    "NIGHTLY_BAZEL_JVM_ARGS": "-Xmx2g -XX:TieredStopAtLevel=1",
    "NIGHTLY_WAREHOUSE_RETRY_S": "12.5",
}


def _read_settings(resources: dict) -> dict:
    """What a run's resources see: materialize an asset that reads them."""
    from nightly_assets.batch.resources import BatchSchedulerResource
    from nightly_assets.containers.resources import ContainerRegistriesResource, DockerRunnerPoolResource
    from nightly_assets.rbe.resources import BazelRbeResource
    from nightly_assets.tpu.resources import TpuVmResource
    from nightly_assets.warehouse.resources import WarehouseResource

    seen: dict = {}

    @dg.asset
    def probe(
        batch: BatchSchedulerResource,
        tpu_vms: TpuVmResource,
        registries: ContainerRegistriesResource,
        docker_pool: DockerRunnerPoolResource,
        bazel_rbe: BazelRbeResource,
        warehouse: WarehouseResource,
    ) -> None:
        tpu = tpu_vms.settings()
        seen.update(
            kind=batch.kind,
            poll_s=batch.poll_s(),
            ssh_port=tpu.ssh_port,
            queued=tpu.use_queued_resource,
            roles={
                role: (registries.endpoint(role).url, registries.endpoint(role).auth)
                for role in registries.roles()
            },
            arm64_base=docker_pool.base_image_for("arm64"),
            max_idle_secs=bazel_rbe.max_idle_secs,
            jvm=[a for a in bazel_rbe._startup(Path("rc")) if a.startswith("--host_jvm_args")],
            retry_s=float(warehouse.retry_s),
        )

    wanted = ("batch", "tpu_vms", "registries", "docker_pool", "bazel_rbe", "warehouse")
    assert dg.materialize([probe], resources={name: resources[name] for name in wanted}).success
    return seen


def test_a_set_variable_reaches_its_resource_by_name_and_the_run_reads_its_value(tmp_path):
    from nightly_assets.resources import resources_for
    from nightly_assets.settings import env_var_names

    with clean_nightly_env(tmp_path / "home", **SETTINGS) as env:
        resources = resources_for("local", tmp_path / "home")
        assert env_var_names(resources) == set(SETTINGS)
        config = {name: resource._convert_to_config_dictionary() for name, resource in resources.items()}
        assert config["batch"]["kind"] == {"env": "NIGHTLY_BATCH_KIND"}
        assert config["registries"]["registries"]["acr"]["url"] == {"env": "NIGHTLY_REGISTRY_ACR_URL"}
        assert config["docker_pool"]["base_images"] == {"arm64": {"env": "NIGHTLY_BASE_IMAGE_ARM64"}}
        for value in SETTINGS.values():
            assert value not in repr(config), f"{value} is in the resources' config"
        env.setenv("NIGHTLY_BATCH_POLL_S", "9.5")  # after the definitions loaded: the run reads it
        seen = _read_settings(resources)
    assert seen == {
        "kind": "slurm",
        "poll_s": 9.5,
        "ssh_port": 2222,
        "queued": True,
        "roles": {"acr": ("https://acr.example:5443", "ecr")},
        "arm64_base": "arm64-base/python:probe",
        "max_idle_secs": 4321,
        "jvm": ["--host_jvm_args=-Xmx2g", "--host_jvm_args=-XX:TieredStopAtLevel=1"],
        "retry_s": 12.5,
    }


def test_an_unset_or_empty_variable_keeps_the_resource_default(tmp_path):
    from nightly_assets.containers.resources import DEFAULT_BASE_IMAGE
    from nightly_assets.resources import resources_for
    from nightly_assets.settings import env_var_names

    # docker-compose gives the containers every optional setting, "" when it is unset.
    with clean_nightly_env(tmp_path / "home", **dict.fromkeys(SETTINGS, "")):
        resources = resources_for("local", tmp_path / "home")
        assert env_var_names(resources) == set()
        seen = _read_settings(resources)
    assert seen == {
        "kind": "local",
        "poll_s": 0.5,
        "ssh_port": 22,
        "queued": False,
        "roles": {},
        "arm64_base": DEFAULT_BASE_IMAGE,
        "max_idle_secs": 900,
        "jvm": [],
        "retry_s": 60.0,
    }


@pytest.mark.parametrize(
    ("settings", "resource", "message"),
    [
        ({"NIGHTLY_BATCH_KIND": "pbs"}, "batch", r"kind\n  Value error, 'pbs': expected 'local' or 'slurm'"),
        (
            {"NIGHTLY_REGISTRY_ECR_URL": "https://ecr.example", "NIGHTLY_REGISTRY_ECR_AUTH": "token"},
            "registries",
            r"registries\.ecr\.auth\n  Value error, 'token': expected 'basic' or 'ecr'",
        ),
        (
            {"NIGHTLY_TPU_POLL_S": "soon"},
            "tpu_vms",
            r"poll_interval_s\n  Value error, 'soon': expected a number",
        ),
        (
            {"NIGHTLY_BAZEL_JVM_ARGS": "-Xmx1g '-Dname=two words"},
            "bazel_rbe",
            r"host_jvm_options\n  Value error, .*: expected options separated by spaces"
            r" \(No closing quotation\)",
        ),
        (
            {"NIGHTLY_TPU_SSH_PORT": "ssh"},
            "tpu_vms",
            r'env variable "NIGHTLY_TPU_SSH_PORT" cannot be coerced',
        ),
        (
            {"NIGHTLY_RUNNER_POOL": "{pool}"},
            "docker_pool",
            r"runner pool file .*pool\.yaml \(pool_file, NIGHTLY_RUNNER_POOL\): expected a mapping",
        ),
        (
            {"NIGHTLY_RUNNER_POOL": "{bad_host}"},
            "docker_pool",
            r"\(pool_file, NIGHTLY_RUNNER_POOL\): hosts\.gpu: .*\ngpu_vendor\n  Input should be 'none'",
        ),
    ],
)
def test_a_bad_value_fails_the_run_naming_the_field_or_variable(tmp_path, settings, resource, message):
    from nightly_assets.resources import resources_for

    (tmp_path / "pool.yaml").write_text("- not\n- a mapping\n")
    (tmp_path / "bad_host.yaml").write_text("hosts:\n  gpu: {gpu_vendor: intel}\n")
    files = {"pool": str(tmp_path / "pool.yaml"), "bad_host": str(tmp_path / "bad_host.yaml")}
    settings = {name: value.format(**files) for name, value in settings.items()}
    with clean_nightly_env(tmp_path / "home", **settings):
        resources = resources_for("local", tmp_path / "home")  # loads: the run reads the values
        with pytest.raises(dg.DagsterError) as raised, dg.build_resources({resource: resources[resource]}):
            pass
    assert re.search(message, f"{raised.value}\n{raised.value.__cause__}"), raised.value.__cause__
