"""The whole code location loads, and its graph is the one the seeds describe."""

import datetime as dt

import dagster as dg
import pytest

from nightly_assets.definitions import build_definitions

EXPECTED_STAGES = {
    "demo": [
        "sources",
        "wheels",
        "image",
        "tests_unit",
        "tests_integration",
        "tests_e2e_gpu_1",
        "tests_e2e_gpu_2",
        "benchmarks",
        "perf_baseline",
        "night_summary",
        "release",
    ],
    "jax_rocm_rbe": ["sources", "build_image", "wheels", "tests_multigpu", "night_summary"],
    "jax_rocm_integration": ["sources", "wheels", "image", "tests_integration", "night_summary"],
    "dynamo": [
        "sources",
        "framework_image",
        "runtime_image",
        "tests_unit",
        "tests_integration",
        "tests_e2e_gpu_1",
        "tests_e2e_gpu_2",
        "night_summary",
    ],
    "torch_spyre": [
        "sources",
        "lint",
        "tests_unit",
        "wheels",
        "image",
        "tests_device",
        "tests_pytorch_in_scope",
        "night_summary",
        "publish_test_index",
        "release",
    ],
    "tpu": ["sources", "tests_tpu", "benchmarks", "perf_baseline", "night_summary"],
    "tf_theta": [
        "sources",
        "wheels",
        "sanity_job",
        "deploy",
        "benchmark_sweep",
        "analysis_report",
        "night_summary",
    ],
}
EXPECTED_TARGETS = {
    "demo": ["cpu"],
    "jax_rocm_rbe": ["rocm-mi300"],
    "jax_rocm_integration": ["rocm-mi300"],
    "dynamo": ["vllm-amd64", "vllm-arm64", "sglang-amd64", "sglang-arm64", "trtllm-amd64", "trtllm-arm64"],
    "torch_spyre": ["pytorch-pinned", "pytorch-main"],
    "tpu": ["v6e-1"],
    "tf_theta": ["theta-knl"],
}
EXPECTED_CRON = {
    "jax_rocm_rbe": "0 2 * * *",
    "jax_rocm_integration": "0 2 * * *",
    "dynamo": "0 8 * * *",
    "tpu": "0 2 * * *",
    "demo": "0 3 * * *",
    "torch_spyre": "0 4 * * *",
    "tf_theta": "0 5 * * *",
}


@pytest.fixture(scope="module")
def defs():
    return build_definitions()


@pytest.fixture(scope="module")
def graph(defs):
    return defs.resolve_asset_graph()


def test_every_pipeline_has_exactly_its_seed_stages(graph):
    keys = {k.to_user_string() for k in graph.get_all_asset_keys()}
    expected = {f"{p}/{s}" for p, stages in EXPECTED_STAGES.items() for s in stages}
    assert keys == expected


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


def test_assets_have_group_kinds_description_and_partitions(graph):
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
        assert dims["target"].get_partition_keys() == EXPECTED_TARGETS[pipeline]


def test_checks_sit_where_the_gates_are(graph):
    checks = {(k.asset_key.to_user_string(), k.name) for k in graph.asset_check_keys}
    for pipeline, stages in EXPECTED_STAGES.items():
        for stage in stages:
            if stage.startswith("tests_"):
                assert (f"{pipeline}/{stage}", "tests_passed") in checks
                assert (f"{pipeline}/{stage}", "test_count_stable") in checks
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


def test_schedules_jobs_and_sensors(defs):
    for pipeline, cron in EXPECTED_CRON.items():
        schedule = defs.resolve_schedule_def(f"{pipeline}_schedule")
        assert schedule.cron_schedule == cron
        assert schedule.execution_timezone == "UTC"
        assert defs.resolve_job_def(f"{pipeline}_nightly")
        assert defs.resolve_job_def(f"{pipeline}_summary")
    assert {s.name for s in defs.sensors} == {
        "night_failure_alerts",
        "night_check_alerts",
        "night_cancelled",
        "night_status_repair",
        "tpu_pr_label",  # tier 3 of seed 003
        "tpu_vm_sweeper",
    }
    pr_job = defs.resolve_job_def("tpu_pr")
    assert [node.name for node in pr_job.nodes] == ["tpu_pr_tests"]
    assert defs.resolve_sensor_def("tpu_pr_label").job_name == "tpu_pr"


def test_schedule_requests_one_run_per_target_for_the_night_that_ended(defs):
    schedule = defs.resolve_schedule_def("dynamo_schedule")
    when = dt.datetime(2026, 11, 22, 8, 0, tzinfo=dt.UTC)
    with dg.build_schedule_context(
        scheduled_execution_time=when, repository_def=defs.get_repository_def()
    ) as context:
        requests = schedule.evaluate_tick(context).run_requests
    assert [r.partition_key for r in requests] == [f"2026-11-21|{t}" for t in EXPECTED_TARGETS["dynamo"]]
    assert len({r.run_key for r in requests}) == 6


def test_checks_are_evaluated_per_night_and_target(graph):
    """Partitioned checks: the UI's check history names the night each result judged."""
    for check_key in graph.asset_check_keys:
        spec = graph.get_check_spec(check_key)
        assert spec.partitions_def == graph.get(check_key.asset_key).partitions_def, check_key


def test_prod_definitions_load_and_their_resources_resolve(monkeypatch, tmp_path):
    """NIGHTLY_ENV=prod: the code location loads with no secret set (they resolve per run), and with
    them set, the resources a run gets are Slack, the GCS artefact store and the warehouse URL."""
    from dagster_slack import SlackResource

    from nightly_assets.artefacts.resources import GcsArtefactStoreResource
    from nightly_assets.reporting.resources import SlackNotifierResource
    from nightly_assets.resources import resources_for

    monkeypatch.setenv("NIGHTLY_ENV", "prod")
    monkeypatch.setenv("NIGHTLY_HOME", str(tmp_path / "home"))
    for name in ("NIGHTLY_WAREHOUSE_URL", "SLACK_BOT_TOKEN", "NIGHTLY_ARTEFACTS_BUCKET"):
        monkeypatch.delenv(name, raising=False)
    prod = build_definitions()
    assert {s.name for s in prod.schedules if s.default_status == dg.DefaultScheduleStatus.RUNNING} == {
        f"{p}_schedule" for p in EXPECTED_CRON
    }
    prod.resolve_all_job_defs()

    monkeypatch.setenv("NIGHTLY_WAREHOUSE_URL", f"sqlite:///{tmp_path}/w.sqlite")
    monkeypatch.setenv("SLACK_BOT_TOKEN", "xoxb-test-token")
    monkeypatch.setenv("NIGHTLY_ARTEFACTS_BUCKET", "nightly-artefacts")
    with dg.build_resources(resources_for("prod", tmp_path / "home")) as resources:
        assert isinstance(resources.notifier, SlackNotifierResource)
        assert isinstance(resources.notifier.slack, SlackResource)
        assert resources.notifier.slack.token == "xoxb-test-token"
        assert isinstance(resources.artefacts, GcsArtefactStoreResource)
        assert resources.artefacts.bucket == "nightly-artefacts"
        assert resources.warehouse.store().nights() == []
