"""The instance the dagster/dagster chart writes from deploy/k8s/values.yaml, and the `nightly init` Job.

There is no helm binary here: the instance is k8s_chart.chart_instance's reproduction of the chart's
instance ConfigMap templates (for the keys these values set). It is checked by Dagster's own
instance-config loader against deploy/dagster.yaml, and the `nightly init` Job in deploy/k8s/ (its
image, command, secret and instance mount) is run with it against the PostgreSQL peer. The chart
version is checked to be Dagster's. A broken copy of the values is shown to be refused too.
"""

from __future__ import annotations

import copy
import os
import re
import subprocess
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml
from dagster import DagsterInstance
from dagster._core.instance.config import dagster_instance_config

from nightly_assets.catalog.loader import load_catalog
from nightly_assets_tests import k8s_chart
from nightly_assets_tests import test_deployment as compose
from nightly_assets_tests.k8s_chart import (
    CHART_VERSION,
    INIT_JOB_FILE,
    POSTGRES_SECRET_KEY,
    ROOT,
    VALUES_FILE,
    chart_instance,
    containers,
    load_manifest,
    load_values,
    set_at,
    user_deployment,
)
from nightly_assets_tests.test_deployment import postgres_database  # noqa: F401  (the PostgreSQL peer)

# -- the instance the chart writes -----------------------------------------------------------------


@pytest.fixture
def pg_password(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("DAGSTER_PG_PASSWORD", "from-the-secret")
    return "from-the-secret"


def _load_instance_config(instance: dict[str, Any], home: Path) -> Mapping[str, Any]:
    home.mkdir(parents=True, exist_ok=True)
    (home / "dagster.yaml").write_text(yaml.safe_dump(instance, sort_keys=False))
    config, _ = dagster_instance_config(str(home), config_filename="dagster.yaml")
    return config


def test_the_chart_instance_is_valid_and_matches_deploy_yaml(pg_password: str, tmp_path: Path) -> None:
    config = _load_instance_config(chart_instance(load_values()), tmp_path / "home")
    deploy = compose._deploy_config()
    for key in ("concurrency", "run_retries", "run_monitoring", "freshness", "telemetry", "compute_logs"):
        assert config[key] == deploy[key], f"{key}: the chart's instance differs from deploy/dagster.yaml"
    assert config["local_artifact_storage"] == deploy["local_artifact_storage"]
    assert config["run_coordinator"]["class"] == deploy["run_coordinator"]["class"]
    assert "config" not in config["run_coordinator"], "the run limit is concurrency.runs only"
    assert config["run_launcher"]["class"] == "K8sRunLauncher"
    assert config["storage"]["postgres"]["postgres_db"]["scheme"] == "postgresql+psycopg2"
    assert config["storage"]["postgres"]["postgres_db"]["password"] == {"env": "DAGSTER_PG_PASSWORD"}


@pytest.mark.parametrize(
    "mutate",
    [
        # Dagster refuses a run limit in both places (and the chart fails the render).
        set_at("dagsterDaemon.runCoordinator.config.queuedRunCoordinator.maxConcurrentRuns", 4),
        set_at("dagsterDaemon.runMonitoring.pollIntervalSeconds", "often"),
        set_at("additionalInstanceConfig", {"freshnes": {"enabled": True}}),
    ],
    ids=lambda m: m.__name__,
)
def test_an_instance_dagster_would_refuse_is_caught(
    mutate: Callable[[dict[str, Any]], None], pg_password: str, tmp_path: Path
) -> None:
    values = load_values()
    mutate(values)
    with pytest.raises(Exception, match=r"(?i)max_concurrent_runs|poll_interval_seconds|freshnes"):
        _load_instance_config(chart_instance(values), tmp_path / "home")


def test_the_daemon_settings_differ_from_deploy_yaml_when_changed(pg_password: str, tmp_path: Path) -> None:
    values = load_values()
    values["dagsterDaemon"]["runRetries"]["maxRetries"] = 5
    config = _load_instance_config(chart_instance(values), tmp_path / "home")
    assert config["run_retries"] != compose._deploy_config()["run_retries"]


# -- the init Job ----------------------------------------------------------------------------------


def test_the_init_job_runs_nightly_init_with_the_chart_instance() -> None:
    values = load_values()
    job = load_manifest(INIT_JOB_FILE, "Job", "nightly-init")
    [container] = containers(job)
    deployment = user_deployment(values)
    assert container["image"] == f"{deployment['image']['repository']}:{deployment['image']['tag']}"
    assert container["command"] == ["nightly", "init"]
    env = {entry["name"]: entry for entry in container["env"]}
    assert env["DAGSTER_PG_PASSWORD"]["valueFrom"]["secretKeyRef"] == {
        "name": values["global"]["postgresqlSecretName"],
        "key": POSTGRES_SECRET_KEY,
    }
    home = env["DAGSTER_HOME"]["value"]
    volumes = {volume["name"]: volume for volume in job["spec"]["template"]["spec"]["volumes"]}
    [instance_mount] = [m for m in container["volumeMounts"] if m["mountPath"] == f"{home}/dagster.yaml"]
    assert volumes[instance_mount["name"]]["configMap"]["name"] == f"{values['fullnameOverride']}-instance"
    assert instance_mount["subPath"] == "dagster.yaml"
    assert f'CHART_VERSION = "{CHART_VERSION}"' in Path(k8s_chart.__file__).read_text()
    assert f"--version {CHART_VERSION}" in VALUES_FILE.read_text()


def test_the_chart_version_is_dagsters() -> None:
    import dagster

    assert dagster.__version__ == CHART_VERSION, "move the chart version with dagster (values.yaml, README)"
    dockerfile = (ROOT / "deploy" / "Dockerfile").read_text()  # one ARG line of several (fewer vfs layers)
    assert re.search(rf"^ARG .*\bDAGSTER_VERSION={re.escape(CHART_VERSION)}(\s|$)", dockerfile, re.M)
    assert f"--version {CHART_VERSION}" in (ROOT / "deploy" / "README.md").read_text()


def test_the_init_job_command_writes_the_pools(
    postgres_database: str,  # noqa: F811 (the fixture imported above)
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The Job's command, with the instance the chart writes (pointed at the PostgreSQL peer): the
    catalog's pool limits end up in the database the webserver and daemon use."""
    values = load_values()
    values["postgresql"].update(
        postgresqlHost=compose.POSTGRES_HOST,
        postgresqlUsername=compose.POSTGRES_ADMIN_USER,
        postgresqlDatabase=postgres_database,
    )
    job = load_manifest(INIT_JOB_FILE, "Job", "nightly-init")
    [container] = containers(job)
    home = tmp_path / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text(yaml.safe_dump(chart_instance(values), sort_keys=False))
    command = [str(Path(sys.executable).parent / container["command"][0]), *container["command"][1:]]
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path),
        "DAGSTER_HOME": str(home),  # the Job's /opt/dagster/dagster_home, here
        "DAGSTER_PG_PASSWORD": "",  # trust auth on the peer
        "NIGHTLY_HOME": str(tmp_path / "nightly"),
    }
    result = subprocess.run(
        command, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False
    )
    assert result.returncode == 0, f"nightly init failed:\n{result.stdout}\n{result.stderr}"
    pools = load_catalog().pools
    assert pools, "the catalog has no pools"
    monkeypatch.setenv("DAGSTER_PG_PASSWORD", "")
    with DagsterInstance.from_config(str(home)) as instance:
        for pool, limit in pools.items():
            assert instance.event_log_storage.get_concurrency_info(pool).slot_count == limit, pool


def test_the_chart_instance_helper_refuses_a_repeated_key() -> None:
    values = copy.deepcopy(load_values())
    values["additionalInstanceConfig"]["run_retries"] = {"enabled": False}
    with pytest.raises(AssertionError, match="run_retries"):
        chart_instance(values)
