"""The docker-compose deployment: docker-compose.yml, deploy/dagster.yaml and how they fit together.

The files are checked with the tools that read them in production: docker-compose 1.29's
``config``, Dagster's own instance-config loader and ``DockerRunLauncher``'s config schema, a real
``DagsterInstance`` on PostgreSQL (the peer on 127.0.0.1:5432), and (marked ``docker``) the launcher
creating a run container on a real engine: it is removed after the worker dies, the run is failed
by run monitoring, and what the container wrote to the compute-log volume is still there.
"""

from __future__ import annotations

import io
import json
import logging
import os
import re
import secrets
import shutil
import subprocess
import sys
import tarfile
import time
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml
from dagster import DagsterInstance, DagsterRunStatus, instance_for_test
from dagster._config import process_config
from dagster._core.instance.config import dagster_instance_config
from dagster._core.launcher import WorkerStatus
from dagster._core.storage.config import pg_config
from dagster._core.test_utils import create_run_for_test
from dagster._daemon.monitoring.run_monitoring import monitor_started_run
from dagster._serdes.config_class import ConfigurableClassData
from dagster_docker import DockerRunLauncher
from dagster_docker.docker_run_launcher import DOCKER_CONTAINER_ID_TAG

from nightly_assets.catalog.loader import load_catalog
from nightly_assets.resources import resources_for
from nightly_assets.settings import env_var_names
from nightly_assets_tests.compose_cli import COMPOSE_FILE, run_compose
from nightly_assets_tests.peers.docker import DockerEngine
from nightly_assets_tests.waiting import wait_for

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"
DEPLOY_YAML = DEPLOY / "dagster.yaml"
LOCAL_YAML = ROOT / "dagster.yaml"

# Secrets: only their names may appear in the files; the values come from the environment.
SECRET_VARS = (
    "DAGSTER_POSTGRES_PASSWORD",
    "SLACK_BOT_TOKEN",
    "NIGHTLY_WAREHOUSE_URL",
    "NIGHTLY_REGISTRY_ECR_PASSWORD",
    "NIGHTLY_REGISTRY_ACR_PASSWORD",
    "NIGHTLY_TEST_INDEX_PASSWORD",
    "NIGHTLY_PROD_INDEX_PASSWORD",
)
# What `docker-compose config` refuses to go without.
REQUIRED_VARS = (
    "DAGSTER_POSTGRES_PASSWORD",
    "SLACK_BOT_TOKEN",
    "NIGHTLY_WAREHOUSE_URL",
    "NIGHTLY_ARTEFACTS_BUCKET",
)
DAGSTER_SERVICES = ("webserver", "daemon")
USER_CODE = "user_code"
POSTGRES_HOST = "127.0.0.1"
POSTGRES_PORT = 5432
POSTGRES_ADMIN_USER = os.environ.get("NIGHTLY_TEST_POSTGRES_USER", "postgres")


def _secret_values() -> dict[str, str]:
    """Fresh, unguessable values of the secrets and the other required settings: if one shows up
    in a file, the file wrote a value in."""
    return {name: f"{name.lower()}-{secrets.token_hex(8)}" for name in (*SECRET_VARS, *REQUIRED_VARS)}


def _deploy_config() -> dict[str, Any]:
    document = yaml.safe_load(DEPLOY_YAML.read_text())
    assert isinstance(document, dict), f"{DEPLOY_YAML}: expected a mapping"
    return document


def _launcher_config() -> dict[str, Any]:
    config = _deploy_config()["run_launcher"]["config"]
    assert isinstance(config, dict)
    return config


def _env_var_names(env_vars: list[str]) -> list[str]:
    return [entry.split("=", 1)[0] for entry in env_vars]


# -- docker-compose.yml ---------------------------------------------------------------------------


def _compose(
    args: list[str], env: Mapping[str, str], tmp_path: Path, files: tuple[Path, ...] = (COMPOSE_FILE,)
) -> subprocess.CompletedProcess[str]:
    return run_compose(args, env, tmp_path, files)


@pytest.fixture(scope="module")
def compose_values() -> dict[str, str]:
    return _secret_values()


@pytest.fixture(scope="module")
def compose_config(
    tmp_path_factory: pytest.TempPathFactory, compose_values: dict[str, str]
) -> dict[str, Any]:
    """`docker-compose config` with only the required settings: the file as compose resolves it."""
    result = _compose(["config"], compose_values, tmp_path_factory.mktemp("compose"))
    assert result.returncode == 0, f"docker-compose config failed:\n{result.stderr}"
    config = yaml.safe_load(result.stdout)
    assert isinstance(config, dict)
    return config


def test_compose_config_is_valid_with_the_minimal_settings(compose_config: dict[str, Any]) -> None:
    assert set(compose_config["services"]) == {"postgres", USER_CODE, *DAGSTER_SERVICES}
    assert compose_config["services"]["postgres"]["image"].startswith("postgres:16")
    assert compose_config["networks"]["nightly_network"]["name"] == "nightly_network"


@pytest.mark.parametrize("missing", REQUIRED_VARS)
def test_compose_config_refuses_to_run_without_a_required_secret(missing: str, tmp_path: Path) -> None:
    env = {name: value for name, value in _secret_values().items() if name != missing}
    result = _compose(["config"], env, tmp_path)
    assert result.returncode != 0
    assert missing in result.stderr


def test_secret_values_come_from_the_environment(
    compose_config: dict[str, Any], compose_values: dict[str, str]
) -> None:
    services = compose_config["services"]
    for service in (USER_CODE, *DAGSTER_SERVICES):
        environment = services[service]["environment"]
        for name, value in compose_values.items():
            assert environment.get(name) == value, f"{service}: {name} is not taken from the environment"
    assert (
        services["postgres"]["environment"]["POSTGRES_PASSWORD"]
        == compose_values["DAGSTER_POSTGRES_PASSWORD"]
    )


def test_no_secret_is_written_into_the_files(compose_values: dict[str, str]) -> None:
    compose_text = COMPOSE_FILE.read_text()
    deploy_text = DEPLOY_YAML.read_text()
    for path, text in ((COMPOSE_FILE, compose_text), (DEPLOY_YAML, deploy_text)):
        for value in compose_values.values():
            assert value not in text, f"{path} contains a secret's value"
    # In compose, a secret is `${NAME}`, `${NAME:?message}` or `${NAME:-}`: no default value.
    interpolation = re.compile(r"\$\{(?P<name>[A-Z0-9_]+)(?P<op>:?[-?])?(?P<rest>[^}]*)\}")
    for match in interpolation.finditer(compose_text):
        if match["name"] in SECRET_VARS and match["op"] in (":-", "-"):
            assert match["rest"] == "", f"{COMPOSE_FILE}: {match[0]} gives a secret a default value"
    raw = yaml.safe_load(compose_text)
    for name, service in raw["services"].items():
        environment = service.get("environment") or {}
        assert isinstance(environment, dict), f"{name}: use the mapping form of environment"
        for key, value in environment.items():
            if key in SECRET_VARS or key == "POSTGRES_PASSWORD":
                assert str(value).startswith("${"), f"{name}: {key} is a literal"
    # In dagster.yaml, secrets are names in env_vars (never NAME=value) or `{env: NAME}`.
    for entry in _launcher_config()["env_vars"]:
        name, _, value = entry.partition("=")
        assert not (name in SECRET_VARS and value), f"{DEPLOY_YAML}: env_vars sets {name} literally"
    password = _deploy_config()["storage"]["postgres"]["postgres_db"]["password"]
    assert password == {"env": "DAGSTER_POSTGRES_PASSWORD"}


def test_the_ui_is_published_on_loopback_only(compose_config: dict[str, Any]) -> None:
    """Dagster OSS has no login: the UI must not be on every interface (deploy/README.md: The UI)."""
    published = {name: service.get("ports", []) for name, service in compose_config["services"].items()}
    assert published.pop("webserver") == ["127.0.0.1:3000:3000/tcp"]
    assert not any(published.values()), f"only the webserver publishes a port: {published}"


def test_the_hosts_docker_host_stays_out_of_the_containers(
    compose_values: dict[str, str], tmp_path: Path
) -> None:
    """Compose reads DOCKER_HOST to find the engine; the containers' DOCKER_HOST is their own setting."""
    host_socket = "unix:///run/operator/docker.sock"
    result = _compose(["config"], {**compose_values, "DOCKER_HOST": host_socket}, tmp_path)
    assert result.returncode == 0, result.stderr
    assert host_socket not in result.stdout
    services = yaml.safe_load(result.stdout)["services"]
    for service in (USER_CODE, *DAGSTER_SERVICES):
        assert services[service]["environment"]["DOCKER_HOST"] == "unix:///var/run/docker.sock"
    remote = "tcp://engine.internal:2376"
    result = _compose(["config"], {**compose_values, "NIGHTLY_CONTAINERS_DOCKER_HOST": remote}, tmp_path)
    assert yaml.safe_load(result.stdout)["services"]["daemon"]["environment"]["DOCKER_HOST"] == remote


def test_the_images_build_from_a_base_image_and_wheelhouse_given(
    compose_config: dict[str, Any], compose_values: dict[str, str], tmp_path: Path
) -> None:
    services = compose_config["services"]
    for service in (USER_CODE, *DAGSTER_SERVICES):
        args = services[service]["build"]["args"]
        assert args["BASE_IMAGE"] == "python:3.11-slim"
        assert args["WHEELHOUSE"] == "build/deploy-wheelhouse"
    assert services[USER_CODE]["build"]["args"]["APT_PACKAGES"] == "git"
    local = {
        "NIGHTLY_DEPLOY_BASE_IMAGE": "local/python:3.11",
        "NIGHTLY_DEPLOY_APT_PACKAGES": "",
        "NIGHTLY_POSTGRES_IMAGE": "local/postgres:16",
    }
    result = _compose(["config"], {**compose_values, **local}, tmp_path)
    assert result.returncode == 0, result.stderr
    services = yaml.safe_load(result.stdout)["services"]
    assert services[USER_CODE]["build"]["args"]["BASE_IMAGE"] == "local/python:3.11"
    assert services[USER_CODE]["build"]["args"]["APT_PACKAGES"] == ""
    assert services["webserver"]["build"]["args"]["BASE_IMAGE"] == "local/python:3.11"
    assert services["postgres"]["image"] == "local/postgres:16"


@pytest.mark.parametrize("dockerfile", ["Dockerfile", "Dockerfile.dagster"])
def test_the_dockerfiles_install_from_the_wheelhouse_only(dockerfile: str) -> None:
    """pip in an image never reaches an index; apt only for the packages an operator names."""
    text = (DEPLOY / dockerfile).read_text()
    assert "ARG BASE_IMAGE=python:3.11-slim\nFROM ${BASE_IMAGE}\n" in text
    installs = re.findall(r"pip install[^\n]*", text)
    assert installs and all("--no-index --find-links" in line for line in installs), installs
    for line in text.splitlines():
        if "apt-get install" in line:
            assert "$APT_PACKAGES" in line, line
    required = (DEPLOY / "requirements.txt").read_text()
    for pinned in re.findall(r'"(dagster[a-z-]*)==\$\{(DAGSTER_[A-Z_]+)\}"', text):
        name, version_arg = pinned
        version = re.search(rf"\b{version_arg}=(\S+)", text)
        assert version is not None
        assert f"{name}=={version[1]}" in required, f"deploy/requirements.txt lacks {name}=={version[1]}"


def test_an_external_postgres_is_a_setting_and_an_override_file(
    compose_values: dict[str, str], tmp_path: Path
) -> None:
    env = {**compose_values, "DAGSTER_POSTGRES_HOST": "10.0.0.5"}
    override = DEPLOY / "docker-compose.external-postgres.yml"
    result = _compose(["config"], env, tmp_path, files=(COMPOSE_FILE, override))
    assert result.returncode == 0, result.stderr
    services = yaml.safe_load(result.stdout)["services"]
    for service in (USER_CODE, *DAGSTER_SERVICES):
        assert services[service]["environment"]["DAGSTER_POSTGRES_HOST"] == "10.0.0.5"
    gate = services["postgres"]
    assert gate["image"] == "nightly_assets_dagster"  # no database, a readiness check of the server
    assert "psycopg2.connect" in " ".join(gate["healthcheck"]["test"])
    assert gate["environment"]["DAGSTER_POSTGRES_HOST"] == "10.0.0.5"
    missing = _compose(["config"], compose_values, tmp_path, files=(COMPOSE_FILE, override))
    assert missing.returncode != 0 and "DAGSTER_POSTGRES_HOST" in missing.stderr


# -- deploy/dagster.yaml --------------------------------------------------------------------------


@pytest.fixture
def deploy_env(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """The variables deploy/dagster.yaml reads, pointed at the PostgreSQL peer."""
    values = _secret_values()
    env = {
        **values,
        "DAGSTER_POSTGRES_USER": POSTGRES_ADMIN_USER,
        "DAGSTER_POSTGRES_HOST": POSTGRES_HOST,
        "DAGSTER_POSTGRES_DB": "dagster",
        "DOCKER_HOST": os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock"),
    }
    # The optional settings: docker-compose.yml gives the daemon each one, "" when unset.
    for name in _launcher_config()["env_vars"]:
        if "=" not in name:  # NAME=value entries carry their value
            env.setdefault(name, "")
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return env


def test_deploy_yaml_is_a_valid_instance_config(deploy_env: dict[str, str]) -> None:
    config, custom_class = dagster_instance_config(str(DEPLOY), config_filename="dagster.yaml")
    assert custom_class is None
    launcher = config["run_launcher"]
    assert (launcher["module"], launcher["class"]) == ("dagster_docker", "DockerRunLauncher")
    assert config["run_coordinator"]["class"] == "QueuedRunCoordinator"
    assert config["compute_logs"]["class"] == "LocalComputeLogManager"
    assert config["telemetry"] == {"enabled": False}
    assert config["run_monitoring"]["enabled"] is True
    assert "postgres" in config["storage"]
    # The storage's `env:` sources resolve with the variables set.
    resolved = process_config(pg_config(), config["storage"]["postgres"])
    assert resolved.success, resolved.errors
    assert resolved.value is not None
    assert resolved.value["postgres_db"]["password"] == deploy_env["DAGSTER_POSTGRES_PASSWORD"]


def test_launcher_config_matches_the_docker_run_launcher_schema(deploy_env: dict[str, str]) -> None:
    block = _deploy_config()["run_launcher"]
    result = process_config(DockerRunLauncher.config_type(), block["config"])
    assert result.success, result.errors
    # What the instance does with the block: import the class, validate, construct.
    launcher = ConfigurableClassData(
        block["module"], block["class"], yaml.safe_dump(block["config"])
    ).rehydrate(DockerRunLauncher)
    assert isinstance(launcher, DockerRunLauncher)
    assert launcher.networks == ["nightly_network"]
    assert launcher.container_kwargs["auto_remove"] is True
    assert "NIGHTLY_ENV=prod" in launcher.env_vars
    for name in SECRET_VARS:
        assert name in launcher.env_vars, f"run containers do not get {name}"


@pytest.mark.parametrize(
    ("key", "typo"),
    [("container_kwargs", "container_kwarg"), ("env_vars", "env_var"), ("network", "netwrok")],
)
def test_a_typo_in_the_launcher_config_is_caught(key: str, typo: str) -> None:
    config = _launcher_config()
    config[typo] = config.pop(key)
    assert not process_config(DockerRunLauncher.config_type(), config).success


def test_queue_pools_and_retries_match_the_embedded_instance() -> None:
    local = yaml.safe_load(LOCAL_YAML.read_text())
    deploy = _deploy_config()
    for key in ("run_coordinator", "concurrency", "run_retries", "freshness", "telemetry"):
        assert deploy[key] == local[key], f"{key} differs from {LOCAL_YAML}"


# -- the two files together -----------------------------------------------------------------------


def test_run_containers_share_the_network_and_volumes_compose_creates(compose_config: dict[str, Any]) -> None:
    launcher = _launcher_config()
    assert compose_config["networks"]["nightly_network"]["name"] == launcher["network"]
    volume_names = {spec["name"]: key for key, spec in compose_config["volumes"].items()}
    run_mounts: dict[str, str] = {}
    for entry in launcher["container_kwargs"]["volumes"]:
        source, target = entry.split(":")[:2]
        assert source in volume_names, f"run containers mount {source}, which compose does not create"
        run_mounts[target] = volume_names[source]
    # The compute logs the run worker writes are on a volume that the webserver reads at the same path.
    compute_logs_dir = _deploy_config()["compute_logs"]["config"]["base_dir"]
    assert compute_logs_dir in run_mounts, "the compute logs would be removed with the run container"
    webserver_mounts = {
        volume.split(":")[1]: volume.split(":")[0]
        for volume in compose_config["services"]["webserver"]["volumes"]
    }
    assert webserver_mounts.get(compute_logs_dir) == run_mounts[compute_logs_dir]
    artefacts_dir = _deploy_config()["local_artifact_storage"]["config"]["base_dir"]
    assert any(artefacts_dir.startswith(target + "/") for target in run_mounts), "step outputs are not kept"


def test_runs_start_in_the_user_code_image(compose_config: dict[str, Any]) -> None:
    user_code = compose_config["services"][USER_CODE]
    assert user_code["environment"]["DAGSTER_CURRENT_IMAGE"] == user_code["image"]
    assert user_code["build"]["dockerfile"] == "deploy/Dockerfile"
    workspace = yaml.safe_load((DEPLOY / "workspace.yaml").read_text())
    server = workspace["load_from"][0]["grpc_server"]
    assert (server["host"], server["port"]) == (USER_CODE, 4000)


def test_the_webserver_and_daemon_wait_for_the_loaded_code_server(compose_config: dict[str, Any]) -> None:
    """Started before the definitions load, the webserver shows the location unreachable for a while."""
    check = compose_config["services"][USER_CODE]["healthcheck"]["test"]
    assert check[-4:] == ["api", "grpc-health-check", "-p", "4000"]
    for service in DAGSTER_SERVICES:
        assert compose_config["services"][service]["depends_on"][USER_CODE] == {
            "condition": "service_healthy"
        }
    assert '"-p", "4000"' in (DEPLOY / "Dockerfile").read_text()


def test_every_variable_the_runs_need_is_set_in_the_daemon(compose_config: dict[str, Any]) -> None:
    # DockerRunLauncher raises at launch for a name in env_vars that the daemon's environment
    # lacks; run workers resolve the instance's `env:` sources in their own environment.
    launcher_names = set(_env_var_names(_launcher_config()["env_vars"]))
    env_sources = env_var_names(_deploy_config())
    assert env_sources <= launcher_names, f"run containers lack {sorted(env_sources - launcher_names)}"
    for service in (*DAGSTER_SERVICES, USER_CODE):
        environment = compose_config["services"][service]["environment"]
        assert env_sources <= set(environment), f"{service} lacks {sorted(env_sources - set(environment))}"
    daemon_env = compose_config["services"]["daemon"]["environment"]
    unset = {name for name in launcher_names if name not in daemon_env and name != "NIGHTLY_ENV"}
    assert not unset, f"the daemon would fail to launch runs: {sorted(unset)} unset"
    assert daemon_env["DOCKER_HOST"] == "unix:///var/run/docker.sock"
    for service in DAGSTER_SERVICES:
        assert any(
            v.endswith(":/var/run/docker.sock:rw") for v in compose_config["services"][service]["volumes"]
        )


# Read by the code location but not settings of a deployment: the image sets NIGHTLY_HOME and ships
# the catalog; the others are what a stage gives the processes it starts.
NOT_DEPLOYMENT_SETTINGS = {
    "NIGHTLY_HOME",
    "NIGHTLY_CATALOG_DIR",
    "NIGHTLY_EXPECTED_DEVICES",
    "NIGHTLY_JOB_ARG",
    "NIGHTLY_PIPES_TOOLS",  # the kubernetes runner's pods: the Pipes entry script, packed
}


def test_every_setting_the_code_reads_reaches_the_run_containers(compose_config: dict[str, Any]) -> None:
    """A setting the docs document but the run containers never get is silently ignored in prod."""
    package = ROOT / "nightly_assets"
    read = {
        name
        for path in package.rglob("*.py")
        if "suites" not in path.relative_to(package).parts
        for name in re.findall(r'"(NIGHTLY_[A-Z_]*[A-Z])"', path.read_text())
    } - NOT_DEPLOYMENT_SETTINGS
    launcher_names = set(_env_var_names(_launcher_config()["env_vars"]))
    assert read <= launcher_names, f"run containers never get {sorted(read - launcher_names)}"
    daemon_env = compose_config["services"]["daemon"]["environment"]
    assert read <= set(daemon_env), f"the daemon has no {sorted(read - set(daemon_env))}"


class _EveryVariableSet(dict[str, str]):
    """`os.environ` as if every setting of ours were set: the resources then wire every setting they
    read. Other names keep their real values: the libraries a resource imports on first use read
    theirs (protobuf, numpy) and refuse "set"."""

    def get(self, key: str, default: Any = None) -> str | None:  # type: ignore[override]
        if key.startswith("NIGHTLY_") or key == "SLACK_BOT_TOKEN":
            return "set"
        return super().get(key, default)


@pytest.mark.parametrize("env", ["local", "prod"])
def test_every_variable_the_resources_read_reaches_the_run_containers(
    env: str, compose_config: dict[str, Any], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The code server wires a setting as `{env: NAME}` when NAME is set in its environment, and the
    run reads NAME in its own container: a name the run containers lack fails the run."""
    with monkeypatch.context() as everything_set:
        everything_set.setattr(os, "environ", _EveryVariableSet(os.environ))
        names = env_var_names(resources_for(env, tmp_path))  # type: ignore[arg-type]
    assert {"NIGHTLY_RUNNER_POOL", "NIGHTLY_REGISTRY_ACR_AUTH", "NIGHTLY_BASE_IMAGE_ARM64"} <= names
    launcher_names = set(_env_var_names(_launcher_config()["env_vars"]))
    assert names <= launcher_names, f"run containers never get {sorted(names - launcher_names)}"
    for service in ("daemon", USER_CODE):
        environment = set(compose_config["services"][service]["environment"])
        assert names <= environment, f"{service} has no {sorted(names - environment)}"


# -- a real instance on PostgreSQL ----------------------------------------------------------------


@pytest.fixture
def postgres_database() -> Iterator[str]:
    """A fresh database on the PostgreSQL peer, dropped afterwards."""
    import psycopg2  # type: ignore[import-untyped]

    try:
        admin = psycopg2.connect(
            host=POSTGRES_HOST,
            port=POSTGRES_PORT,
            user=POSTGRES_ADMIN_USER,
            dbname="postgres",
            connect_timeout=5,
        )
    except psycopg2.OperationalError as exc:
        pytest.fail(
            f"the PostgreSQL peer does not answer on {POSTGRES_HOST}:{POSTGRES_PORT} as "
            f"{POSTGRES_ADMIN_USER} (trust auth): apt-get install postgresql and start it, "
            f"or set NIGHTLY_TEST_POSTGRES_USER: {exc}"
        )
    admin.autocommit = True
    name = f"nightly_deploy_{uuid.uuid4().hex[:12]}"
    try:
        with admin.cursor() as cursor:
            cursor.execute(f'CREATE DATABASE "{name}"')
        yield name
    finally:
        with admin.cursor() as cursor:
            cursor.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.close()


def test_deploy_yaml_makes_a_working_instance_on_postgres(
    deploy_env: dict[str, str], postgres_database: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    try:
        import dagster_postgres  # noqa: F401
    except ImportError:
        pytest.fail("dagster-postgres is not installed: pip install -e '.[deploy]'")
    monkeypatch.setenv("DAGSTER_POSTGRES_DB", postgres_database)
    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copyfile(DEPLOY_YAML, home / "dagster.yaml")
    with DagsterInstance.from_config(str(home)) as instance:
        assert type(instance.run_storage).__name__ == "PostgresRunStorage"
        assert isinstance(instance.run_launcher, DockerRunLauncher)
        assert type(instance.compute_log_manager).__name__ == "LocalComputeLogManager"
        assert instance.run_coordinator is not None
        assert type(instance.run_coordinator).__name__ == "QueuedRunCoordinator"
        run_queue = instance.get_concurrency_config().run_queue_config
        assert run_queue is not None and run_queue.max_concurrent_runs == 4
        assert (instance.run_retries_enabled, instance.run_retries_max_retries) == (True, 2)
        assert instance.run_monitoring_enabled
        assert instance.run_launcher.supports_check_run_worker_health
        # What `nightly init` does in the user_code container: pool limits into the database.
        instance.event_log_storage.set_concurrency_slots("gpu", 1)
        assert instance.event_log_storage.get_concurrency_info("gpu").slot_count == 1
        # Run containers rebuild the instance from this ref; it carries `env:` names, not values.
        ref_text = repr(instance.get_ref())
        assert deploy_env["DAGSTER_POSTGRES_PASSWORD"] not in ref_text


# -- the launcher against a real engine -----------------------------------------------------------

_WORKER = """
import json, os, pathlib, sys, time
out = pathlib.Path(sys.argv[1]); out.mkdir(parents=True, exist_ok=True)
names = sys.argv[2:]
(out / "probe.json").write_text(json.dumps({n: os.environ.get(n) for n in names}))
print("probe written", flush=True)
time.sleep(120)
"""


def _wait_for(predicate: Any, what: str, timeout: float = 60.0) -> Any:
    return wait_for(what, predicate, timeout_s=timeout)


def _read_from_volumes(client, image: str, volumes: list[str], path: str) -> bytes:
    """A file's bytes from the engine's volumes, through the archive API of a container that never
    starts (a short `cat` container's logs can come back empty on a loaded engine)."""
    reader = client.containers.create(image, ["true"], volumes=volumes, network_mode="none")
    try:
        stream, _ = reader.get_archive(path)
        with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as archive:
            member = archive.extractfile(archive.getmembers()[0])
            assert member is not None, f"{path} is not a file"
            return member.read()
    finally:
        reader.remove(force=True)


@pytest.mark.docker
def test_run_container_is_removed_and_its_logs_are_kept(
    docker_engine: DockerEngine, base_image: str, deploy_env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in docker_engine.env().items():
        monkeypatch.setenv(name, value)
    launcher_block = _deploy_config()["run_launcher"]
    launcher_config = launcher_block["config"]
    compute_logs_dir = _deploy_config()["compute_logs"]["config"]["base_dir"]
    client = docker_engine.client()
    created_network = created_volumes = None
    container_id = None
    try:
        network = launcher_config["network"]
        if network not in {n.name for n in client.networks.list()}:
            client.networks.create(network, driver="bridge")
            created_network = network
        existing = {v.name for v in client.volumes.list()}
        volume_names = [entry.split(":")[0] for entry in launcher_config["container_kwargs"]["volumes"]]
        created_volumes = [name for name in volume_names if name not in existing]
        with instance_for_test(overrides={"run_launcher": launcher_block}) as instance:
            launcher = instance.run_launcher
            assert isinstance(launcher, DockerRunLauncher)
            run = create_run_for_test(instance, job_name="deploy_probe", status=DagsterRunStatus.STARTED)
            out_dir = f"{compute_logs_dir}/{run.run_id}"
            names = ["NIGHTLY_ENV", "DAGSTER_RUN_JOB_NAME", *SECRET_VARS]
            # The container the launcher would start for a run, with a stand-in run worker.
            launcher._launch_container_with_command(
                run, base_image, ["python3", "-c", _WORKER, out_dir, *names]
            )
            run = instance.get_run_by_id(run.run_id)
            assert run is not None
            container_id = run.tags[DOCKER_CONTAINER_ID_TAG]
            container = client.containers.get(container_id)
            assert container.attrs["HostConfig"]["AutoRemove"] is True
            assert network in container.attrs["NetworkSettings"]["Networks"]
            _wait_for(lambda: b"probe written" in container.logs(), "the stand-in worker")
            assert launcher.check_run_worker_health(run).status == WorkerStatus.RUNNING

            container.kill()  # the run worker dies (OOM, a crash) without reporting the run
            _wait_for(
                lambda: launcher.check_run_worker_health(run).status == WorkerStatus.NOT_FOUND,
                "the engine to remove the container",
            )
            assert container_id in (launcher.check_run_worker_health(run).msg or "")
            # Run monitoring still fails the run (run_retries re-runs it under the daemon).
            record = instance.get_run_record_by_id(run.run_id)
            assert record is not None
            monitor_started_run(instance, None, record, logging.getLogger(__name__))  # type: ignore[arg-type]
            failed = instance.get_run_by_id(run.run_id)
            assert failed is not None and failed.status == DagsterRunStatus.FAILURE

            # What the worker wrote under the compute-log dir outlived its container.
            volumes = launcher_config["container_kwargs"]["volumes"]
            seen = json.loads(_read_from_volumes(client, base_image, volumes, f"{out_dir}/probe.json"))
            assert seen["NIGHTLY_ENV"] == "prod"
            assert seen["DAGSTER_RUN_JOB_NAME"] == "deploy_probe"
            for name in SECRET_VARS:
                assert seen[name] == deploy_env[name], f"{name} did not reach the run container"
            client.containers.run(
                base_image, ["rm", "-rf", out_dir], volumes=volumes, network_mode="none", remove=True
            )
    finally:
        if container_id is not None:  # left behind only when the engine did not remove it
            for leftover in client.containers.list(all=True, filters={"id": container_id}):
                leftover.remove(force=True)
        for volume in client.volumes.list():
            if volume.name in (created_volumes or []):
                volume.remove(force=True)
        for leftover in client.networks.list():
            if leftover.name == created_network:
                leftover.remove()
        client.close()


# -- the user_code service's code server ----------------------------------------------------------


def _dockerfile_cmd() -> list[str]:
    lines = (DEPLOY / "Dockerfile").read_text().splitlines()
    line = next(text for text in lines if text.startswith("CMD "))
    command = json.loads(line.removeprefix("CMD "))
    assert isinstance(command, list)
    return [str(part) for part in command]


def test_the_code_server_starts_with_the_prod_definitions(
    compose_config: dict[str, Any], tmp_path: Path
) -> None:
    """The user_code service's own command, with the environment compose gives it (NIGHTLY_ENV=prod),
    run on this machine (building the image needs PyPI): it serves every pipeline, schedules on."""
    from dagster._core.remote_origin import GrpcServerCodeLocationOrigin
    from dagster._core.remote_representation.code_location import GrpcServerCodeLocation
    from dagster._grpc.client import DagsterGrpcClient

    from nightly_assets_tests.peers.process import free_port, stop_process

    command = _dockerfile_cmd()
    assert command[:3] == ["dagster", "code-server", "start"]
    port = free_port()
    command[0] = str(Path(sys.executable).parent / "dagster")
    command[command.index("-h") + 1] = "127.0.0.1"
    command[command.index("-p") + 1] = str(port)
    service_env = {k: str(v) for k, v in compose_config["services"][USER_CODE]["environment"].items()}
    assert service_env["NIGHTLY_ENV"] == "prod"
    env = {
        **service_env,
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path),
        "DAGSTER_HOME": str(tmp_path / "dagster_home"),
        "NIGHTLY_HOME": str(tmp_path / "nightly"),
    }
    (tmp_path / "dagster_home").mkdir()
    log = tmp_path / "code_server.log"
    with log.open("wb") as out:
        server = subprocess.Popen(command, env=env, cwd=tmp_path, stdout=out, stderr=subprocess.STDOUT)
    try:
        client = DagsterGrpcClient(port=port, host="127.0.0.1")
        deadline = time.monotonic() + 120
        while True:
            assert server.poll() is None, f"the code server exited {server.returncode}:\n{log.read_text()}"
            try:
                client.ping("up")
                break
            except Exception:
                assert time.monotonic() < deadline, f"no answer on {port}:\n{log.read_text()}"
                time.sleep(0.5)
        origin = GrpcServerCodeLocationOrigin(host="127.0.0.1", port=port, location_name="nightly_assets")
        with DagsterInstance.ephemeral() as instance:
            location = GrpcServerCodeLocation(origin=origin, instance=instance, watch_server=False)
            [repository] = location.get_repositories().values()
            jobs = {job.name for job in repository.get_all_jobs()}
            schedules = {s.name: s.default_status for s in repository.get_schedules()}
            location.cleanup()
    finally:
        stop_process(server, 10)
    assert {"demo_nightly", "dynamo_nightly", "tpu_nightly", "tf_theta_summary", "tpu_pr"} <= jobs
    assert len(schedules) == len(load_catalog().pipelines), schedules  # one per pipeline
    assert all(str(status).endswith("RUNNING") for status in schedules.values()), schedules
    assert "Traceback" not in log.read_text()
