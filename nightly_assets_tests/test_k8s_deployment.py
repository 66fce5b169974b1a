"""The Kubernetes deployment: deploy/k8s/ (Helm values of dagster/dagster, the manifests beside them).

There is no Kubernetes API server and no helm binary here, so nothing is installed or rendered;
what the chart would make of the values is modelled in nightly_assets_tests/k8s_chart.py. Here:

* every manifest in deploy/k8s/ is validated with kubernetes-validate's strict schemas of a pinned
  Kubernetes version (unknown fields, wrong types and missing required fields are refused);
* the values' own structure is checked against CHART_VALUES
  (data/k8s/dagster_chart_values.schema.json), a transcription of the parts of the chart's values
  schema that these values use (the chart's values.schema.json itself could not be fetched: see
  deploy/README.md), closed where the chart's is, so a misspelt key is refused;
* the Kubernetes objects inside the Helm values (env, envFrom sources, volumes, volume mounts) are
  put into the Pods the chart makes of them and validated the same way;
* no secret's value is written into the files, every setting the code reads (and compose passes)
  reaches the code server and the run pods, the volumes are compose's as claims, and the code
  server is the deploy/Dockerfile image's.

The instance the chart writes and the `nightly init` Job are in test_k8s_instance.py. Each check is
also shown to refuse a broken copy of the files.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from nightly_assets.resources import resources_for
from nightly_assets.settings import env_var_names
from nightly_assets_tests import test_deployment as compose
from nightly_assets_tests.k8s_chart import (
    CHART_VALUES,
    INIT_JOB_FILE,
    MANIFEST_FILES,
    POSTGRES_SECRET_KEY,
    ROOT,
    SECRETS_FILE,
    SETTINGS_FILE,
    VALUES_FILE,
    VOLUMES_FILE,
    build_pods,
    containers,
    drop_at,
    env_list,
    k8s_errors,
    k8s_setting_names,
    load_documents,
    load_manifest,
    load_manifests,
    load_values,
    rename_at,
    run_launcher,
    set_at,
    structure_errors,
    user_deployment,
)

SETTINGS_CONFIGMAP = "nightly-settings"
SECRETS_SECRET = "nightly-secrets"
POSTGRES_SECRET = "dagster-postgresql-secret"
# The code location's secrets: compose's, less the database password (the chart's own Secret),
# with the tokens that compose passes as plain settings.
K8S_SECRET_VARS = (
    *(name for name in compose.SECRET_VARS if name != "DAGSTER_POSTGRES_PASSWORD"),
    "NIGHTLY_GITHUB_TOKEN",
    "NIGHTLY_RBE_TOKEN",
    "NIGHTLY_K8S_TOKEN",
    "NIGHTLY_SMTP_PASSWORD",
)
# Compose settings that Kubernetes does without: the chart configures the instance's database
# itself (DAGSTER_PG_PASSWORD from the Secret, host and user from the values).
COMPOSE_ONLY = {
    "DAGSTER_POSTGRES_USER",
    "DAGSTER_POSTGRES_PASSWORD",
    "DAGSTER_POSTGRES_HOST",
    "DAGSTER_POSTGRES_DB",
}


# -- the manifests ---------------------------------------------------------------------------------


@pytest.mark.parametrize("path", MANIFEST_FILES, ids=lambda p: p.name)
def test_every_manifest_is_valid_kubernetes(path: Path) -> None:
    documents = load_documents(path)
    assert documents, f"{path}: no manifest"
    for document in documents:
        error = k8s_errors(document)
        assert error is None, f"{path}: {document['kind']}/{document['metadata']['name']}: {error}"


def _break_pvc(docs: list[dict[str, Any]]) -> None:
    docs[0]["spec"]["accessModes"] = "ReadWriteMany"  # a string, not a list


def _break_job_field(docs: list[dict[str, Any]]) -> None:
    docs[0]["spec"]["template"]["spec"]["containers"][0]["imagePullPolicyy"] = "Always"


def _break_job_image(docs: list[dict[str, Any]]) -> None:
    docs[0]["spec"]["template"]["spec"]["containers"][0].pop("name")


def _break_secret(docs: list[dict[str, Any]]) -> None:
    docs[1]["stringdata"] = docs[1].pop("stringData")


def _break_configmap(docs: list[dict[str, Any]]) -> None:
    docs[0]["data"]["NIGHTLY_TPU_POLL_S"] = 30  # ConfigMap data values are strings


@pytest.mark.parametrize(
    ("path", "breaks"),
    [
        (VOLUMES_FILE, _break_pvc),
        (INIT_JOB_FILE, _break_job_field),
        (INIT_JOB_FILE, _break_job_image),
        (SECRETS_FILE, _break_secret),
        (SETTINGS_FILE, _break_configmap),
    ],
    ids=lambda v: v.name if isinstance(v, Path) else v.__name__,
)
def test_a_broken_manifest_is_refused(path: Path, breaks: Callable[[list[dict[str, Any]]], None]) -> None:
    documents = load_documents(path)
    breaks(documents)
    errors = [k8s_errors(document) for document in documents]
    assert any(errors), f"kubernetes-validate accepted a broken {path.name}"


# -- the Helm values: structure --------------------------------------------------------------------


def test_the_chart_values_schema_is_a_valid_json_schema() -> None:
    jsonschema.Draft202012Validator.check_schema(CHART_VALUES)


def test_values_fit_the_chart_structure() -> None:
    errors = structure_errors(load_values())
    assert not errors, "deploy/k8s/values.yaml:\n" + "\n".join(errors)


@pytest.mark.parametrize(
    "mutate",
    [
        rename_at("runLauncher.config.k8sRunLauncher.envSecrets", "envSecret"),
        rename_at("dagsterDaemon.runRetries", "runRetry"),
        set_at("runLauncher.type", "K8sLauncher"),
        drop_at("runLauncher.config.k8sRunLauncher"),
        set_at("dagsterDaemon.runRetries.maxRetries", "2"),
        set_at("concurrency.pools.granularity", "step"),
        drop_at("dagster-user-deployments.deployments.0.image"),
        set_at("dagster-user-deployments.deployments.0.name", "nightly_assets"),
        set_at("dagster-user-deployments.deployments.0.envSecrets", ["nightly-secrets"]),
        set_at("computeLogManager.config", {}),
        set_at("imagePullSecret", []),
    ],
    ids=lambda m: m.__name__,
)
def test_a_value_the_chart_would_refuse_is_caught(mutate: Callable[[dict[str, Any]], None]) -> None:
    values = load_values()
    mutate(values)
    assert structure_errors(values), f"{mutate.__name__} was accepted"


# -- the Helm values: the Pods they make -----------------------------------------------------------


def _pod_problems(values: dict[str, Any]) -> list[str]:
    problems = []
    for component, pod in build_pods(values).items():
        error = k8s_errors(pod)
        if error:
            problems.append(f"{component}: {error}")
        spec = pod["spec"]
        declared = [volume["name"] for volume in spec.get("volumes", [])]
        if len(declared) != len(set(declared)):
            problems.append(f"{component}: a volume is declared twice: {declared}")
        for mount in spec["containers"][0].get("volumeMounts", []):
            if mount.get("name") not in declared:
                problems.append(f"{component}: mounts {mount.get('name')}, which no volume declares")
    return problems


def test_the_pods_the_values_make_are_valid_kubernetes() -> None:
    problems = _pod_problems(load_values())
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize(
    "mutate",
    [
        drop_at("dagster-user-deployments.deployments.0.volumeMounts.0.mountPath"),
        set_at("dagster-user-deployments.deployments.0.env", [{"name": "NIGHTLY_ENV", "valu": "prod"}]),
        set_at("dagsterDaemon.volumes.0.persistentVolumeClaim", {"claim": "nightly-data"}),
        set_at("dagsterWebserver.volumeMounts.0.name", "compute-logs"),
        set_at("runLauncher.config.k8sRunLauncher.volumes", [{"name": "nightly-data", "emptyDir": {}}]),
    ],
    ids=lambda m: m.__name__,
)
def test_a_pod_kubernetes_would_refuse_is_caught(mutate: Callable[[dict[str, Any]], None]) -> None:
    values = load_values()
    mutate(values)
    assert _pod_problems(values), f"{mutate.__name__} was accepted"


# -- secrets ---------------------------------------------------------------------------------------


def _secret_problems(values: dict[str, Any], manifests: list[dict[str, Any]]) -> list[str]:
    """Where a secret's value would be written into the files instead of referenced."""
    problems = []
    secret_names = {*K8S_SECRET_VARS, "DAGSTER_PG_PASSWORD", "DAGSTER_POSTGRES_PASSWORD"}
    for manifest in manifests:
        kind, name = manifest["kind"], manifest["metadata"]["name"]
        if kind == "Secret":
            if manifest.get("data"):
                problems.append(f"Secret {name}: has data (values)")
            for key, value in (manifest.get("stringData") or {}).items():
                if value not in ("", None):
                    problems.append(f"Secret {name}: {key} has a value")
        if kind == "ConfigMap":
            for key in secret_names & set(manifest.get("data") or {}):
                problems.append(f"ConfigMap {name}: {key} is a secret, it belongs in a Secret")
        for container in containers(manifest):
            problems += _env_problems(f"{kind} {name}", container.get("env"), secret_names)
    postgresql = values["postgresql"]
    if postgresql.get("postgresqlPassword"):
        problems.append("values: postgresql.postgresqlPassword has a value")
    if values.get("generatePostgresqlPasswordSecret", True):
        problems.append("values: generatePostgresqlPasswordSecret would make the chart write the password")
    for where, part in (
        ("dagsterWebserver", values["dagsterWebserver"]),
        ("dagsterDaemon", values["dagsterDaemon"]),
        ("user deployment", user_deployment(values)),
    ):
        problems += _env_problems(where, part.get("env"), secret_names)
    for entry in run_launcher(values).get("envVars") or []:
        key, sep, value = entry.partition("=")
        if key in secret_names and sep:
            problems.append(f"runLauncher envVars: {key} is set to a value")
    return problems


def _env_problems(where: str, env: Any, secret_names: set[str]) -> list[str]:
    problems = []
    for entry in env_list(env):
        if entry["name"] in secret_names:
            if "value" in entry:
                problems.append(f"{where}: {entry['name']} is a literal value")
            elif "secretKeyRef" not in (entry.get("valueFrom") or {}):
                problems.append(f"{where}: {entry['name']} does not come from a Secret")
    return problems


def test_secrets_are_only_referenced() -> None:
    problems = _secret_problems(load_values(), load_manifests())
    assert not problems, "\n".join(problems)
    secret = load_manifest(SECRETS_FILE, "Secret", SECRETS_SECRET)
    assert set(secret["stringData"]) == set(K8S_SECRET_VARS)
    values = load_values()
    assert values["global"]["postgresqlSecretName"] == POSTGRES_SECRET
    assert set(load_manifest(SECRETS_FILE, "Secret", POSTGRES_SECRET)["stringData"]) == {POSTGRES_SECRET_KEY}
    for text in (VALUES_FILE.read_text(), *(path.read_text() for path in MANIFEST_FILES)):
        for value in compose._secret_values().values():
            assert value not in text


def _inline_slack_token(values: dict[str, Any], manifests: list[dict[str, Any]]) -> None:
    user_deployment(values)["env"].append({"name": "SLACK_BOT_TOKEN", "value": "xoxb-1234"})


def _fill_the_template(values: dict[str, Any], manifests: list[dict[str, Any]]) -> None:
    secret = next(m for m in manifests if m["metadata"]["name"] == SECRETS_SECRET)
    secret["stringData"]["SLACK_BOT_TOKEN"] = "x"


def _secret_in_the_configmap(values: dict[str, Any], manifests: list[dict[str, Any]]) -> None:
    next(m for m in manifests if m["kind"] == "ConfigMap")["data"]["NIGHTLY_GITHUB_TOKEN"] = ""


def _password_in_the_values(values: dict[str, Any], manifests: list[dict[str, Any]]) -> None:
    values["postgresql"]["postgresqlPassword"] = "hunter2"


def _chart_makes_the_secret(values: dict[str, Any], manifests: list[dict[str, Any]]) -> None:
    values["generatePostgresqlPasswordSecret"] = True


def _password_in_the_job(values: dict[str, Any], manifests: list[dict[str, Any]]) -> None:
    job = next(m for m in manifests if m["kind"] == "Job")
    env = job["spec"]["template"]["spec"]["containers"][0]["env"]
    next(e for e in env if e["name"] == "DAGSTER_PG_PASSWORD")["valueFrom"] = {"configMapKeyRef": {}}


def _token_in_the_launcher(values: dict[str, Any], manifests: list[dict[str, Any]]) -> None:
    run_launcher(values)["envVars"].append("NIGHTLY_RBE_TOKEN=abc")


@pytest.mark.parametrize(
    "mutate",
    [
        _inline_slack_token,
        _fill_the_template,
        _secret_in_the_configmap,
        _password_in_the_values,
        _chart_makes_the_secret,
        _password_in_the_job,
        _token_in_the_launcher,
    ],
    ids=lambda m: m.__name__.strip("_"),
)
def test_a_secret_written_into_the_files_is_caught(mutate: Callable[..., None]) -> None:
    values, manifests = load_values(), load_manifests()
    mutate(values, manifests)
    assert _secret_problems(values, manifests), f"{mutate.__name__} was accepted"


# -- settings: what reaches the code server and the run pods ---------------------------------------


def _code_reads() -> set[str]:
    package = ROOT / "nightly_assets"
    return {
        name
        for path in package.rglob("*.py")
        if "suites" not in path.relative_to(package).parts
        for name in re.findall(r'"(NIGHTLY_[A-Z_]*[A-Z])"', path.read_text())
    } - compose.NOT_DEPLOYMENT_SETTINGS


def _missing_settings(values: dict[str, Any], manifests: list[dict[str, Any]], wanted: set[str]) -> list[str]:
    return [
        f"{component} never get {sorted(wanted - got)}"
        for component, got in k8s_setting_names(values, manifests).items()
        if wanted - got
    ]


def test_every_setting_the_code_reads_reaches_the_code_server_and_the_runs() -> None:
    read = _code_reads()
    assert {"NIGHTLY_RUNNER_POOL", "NIGHTLY_TPU_PROJECT", "NIGHTLY_WAREHOUSE_URL"} <= read
    missing = _missing_settings(load_values(), load_manifests(), read)
    assert not missing, "\n".join(missing)


def test_every_setting_compose_passes_is_passed_on_kubernetes() -> None:
    """Same settings as the docker-compose deployment, less its own database variables."""
    compose_names = set(compose._env_var_names(compose._launcher_config()["env_vars"])) - COMPOSE_ONLY
    missing = _missing_settings(load_values(), load_manifests(), compose_names)
    assert not missing, "\n".join(missing)
    names = k8s_setting_names(load_values(), load_manifests())
    for component in names:
        assert "NIGHTLY_ENV" in names[component]
    deployment_env = {e["name"]: e.get("value") for e in env_list(user_deployment(load_values())["env"])}
    assert deployment_env["NIGHTLY_ENV"] == "prod"
    assert "NIGHTLY_ENV=prod" in run_launcher(load_values())["envVars"]


@pytest.mark.parametrize("env", ["local", "prod"])
def test_every_variable_the_resources_read_reaches_the_runs(
    env: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    with monkeypatch.context() as everything_set:
        everything_set.setattr(os, "environ", compose._EveryVariableSet(os.environ))
        names = env_var_names(resources_for(env, tmp_path))  # type: ignore[arg-type]
    assert {"NIGHTLY_RUNNER_POOL", "NIGHTLY_REGISTRY_ACR_AUTH", "NIGHTLY_BASE_IMAGE_ARM64"} <= names
    missing = _missing_settings(load_values(), load_manifests(), names)
    assert not missing, "\n".join(missing)


def _drop_configmap_key(values: dict[str, Any], manifests: list[dict[str, Any]]) -> None:
    del next(m for m in manifests if m["kind"] == "ConfigMap")["data"]["NIGHTLY_TPU_PROJECT"]


def _drop_secret_source(values: dict[str, Any], manifests: list[dict[str, Any]]) -> None:
    user_deployment(values)["envSecrets"] = []
    run_launcher(values)["envSecrets"] = []


def _runs_without_the_deployment(values: dict[str, Any], manifests: list[dict[str, Any]]) -> None:
    user_deployment(values)["includeConfigInLaunchedRuns"] = {"enabled": False}
    run_launcher(values)["envVars"] = []


@pytest.mark.parametrize(
    "mutate",
    [_drop_configmap_key, _drop_secret_source, _runs_without_the_deployment],
    ids=lambda m: m.__name__,
)
def test_a_setting_left_out_is_caught(mutate: Callable[..., None]) -> None:
    values, manifests = load_values(), load_manifests()
    mutate(values, manifests)
    assert _missing_settings(values, manifests, _code_reads() | {"NIGHTLY_ENV"})


def test_an_env_source_that_is_not_defined_is_caught() -> None:
    values = load_values()
    run_launcher(values)["envConfigMaps"].append({"name": "nightly-setings"})
    with pytest.raises(AssertionError, match="nightly-setings"):
        k8s_setting_names(values, load_manifests())


# -- volumes ---------------------------------------------------------------------------------------


def _mounts(part: dict[str, Any]) -> dict[str, str]:
    """mount path -> claim name of a component's PVC mounts."""
    claims = {
        volume["name"]: volume["persistentVolumeClaim"]["claimName"]
        for volume in part.get("volumes") or []
        if "persistentVolumeClaim" in volume
    }
    return {mount["mountPath"]: claims[mount["name"]] for mount in part.get("volumeMounts") or []}


def test_volumes_are_the_compose_ones_as_claims() -> None:
    values = load_values()
    pvcs = {doc["metadata"]["name"]: doc for doc in load_documents(VOLUMES_FILE)}
    for name, pvc in pvcs.items():
        assert pvc["kind"] == "PersistentVolumeClaim"
        # Pods on different nodes share them: webserver, daemon, code server, a pod per run.
        assert pvc["spec"]["accessModes"] == ["ReadWriteMany"], f"{name} must be ReadWriteMany"
    deploy = compose._deploy_config()
    compute_logs = deploy["compute_logs"]["config"]["base_dir"]
    compose_mounts = {
        entry.split(":")[1]: entry.split(":")[0]
        for entry in compose._launcher_config()["container_kwargs"]["volumes"]
    }
    deployment = user_deployment(values)
    assert deployment["includeConfigInLaunchedRuns"]["enabled"], "run pods would not get the volumes"
    run_mounts = {**_mounts(run_launcher(values)), **_mounts(deployment)}
    # Every path compose mounts into run containers is a claim here, at the same path.
    assert set(compose_mounts) == set(run_mounts), f"compose {compose_mounts}, k8s {run_mounts}"
    assert set(run_mounts.values()) <= set(pvcs), f"run pods mount a claim volumes.yaml lacks: {run_mounts}"
    # Compute logs: written by the run pods, read by the webserver from the same claim.
    assert _mounts(values["dagsterWebserver"]).get(compute_logs) == run_mounts[compute_logs]
    assert _mounts(values["dagsterDaemon"]).get(compute_logs) == run_mounts[compute_logs]
    # Step outputs and NIGHTLY_HOME (the image's) are on a claim too.
    artefacts = values["additionalInstanceConfig"]["local_artifact_storage"]["config"]["base_dir"]
    assert artefacts == deploy["local_artifact_storage"]["config"]["base_dir"]
    nightly_home = re.search(r"NIGHTLY_HOME=(\S+)", (ROOT / "deploy" / "Dockerfile").read_text())
    assert nightly_home is not None
    for path in (artefacts, nightly_home[1]):
        assert any(path.startswith(target + "/") for target in run_mounts), f"{path} is not on a claim"
    custom = values["computeLogManager"]["config"]["customComputeLogManager"]
    assert custom["config"]["base_dir"] == compute_logs


# -- the code server -------------------------------------------------------------------------------


def test_the_code_server_is_the_deploy_dockerfile_image() -> None:
    values = load_values()
    deployment = user_deployment(values)
    command = compose._dockerfile_cmd()
    port = command[command.index("-p") + 1]
    assert deployment["port"] == int(port)
    # The chart runs `dagster code-server start -h 0.0.0.0 -p <port> <codeServerArgs>`: the CMD's rest.
    all_interfaces = "0.0.0.0"  # noqa: S104 (the chart's code server, as the image's CMD)
    assert command[: command.index("-p")] == ["dagster", "code-server", "start", "-h", all_interfaces]
    assert deployment["codeServerArgs"] == command[command.index("-p") + 2 :]
    assert "dagster-k8s==" in (ROOT / "deploy" / "Dockerfile").read_text(), "run pods load K8sRunLauncher"
    # The webserver and daemon reach it by its Service, under the location name compose uses.
    [server] = values["dagsterWebserver"]["workspace"]["servers"]
    compose_server = yaml.safe_load((ROOT / "deploy" / "workspace.yaml").read_text())["load_from"][0]
    assert (server["host"], server["port"]) == (deployment["name"], deployment["port"])
    assert server["name"] == compose_server["grpc_server"]["location_name"]
