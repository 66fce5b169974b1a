"""A model of what the dagster/dagster Helm chart makes of deploy/k8s/ (for the Kubernetes tests).

There is no helm binary and no Kubernetes API server here, so the chart is never rendered: this
module reproduces, by hand and only for the keys deploy/k8s/values.yaml sets, what the chart would
make of them, so the tests can check it:

* loading the values and the manifests beside them (the init Job, settings, secrets, volumes);
* the chart's values structure: CHART_VALUES, a JSON schema (data/k8s/dagster_chart_values.schema.json)
  written from the chart's values definitions, and the errors a values mapping has against it;
* the Pods the chart makes of the values (webserver, daemon, code server, a run pod) and
  kubernetes-validate, strict, on them and on the manifests;
* the variable names each component gets from the values and the ConfigMaps/Secrets they name;
* chart_instance: the instance ConfigMap (dagster.yaml) the chart's templates write;
* editing a copy of the values (set_at, rename_at, drop_at), for the tests' broken copies.

It is not a helm render: what the values leave at the chart's defaults is left out, and a chart
version other than CHART_VERSION may differ.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import yaml

ROOT = Path(__file__).resolve().parents[1]
K8S = ROOT / "deploy" / "k8s"
VALUES_FILE = K8S / "values.yaml"
SETTINGS_FILE = K8S / "nightly-settings.yaml"
SECRETS_FILE = K8S / "secrets.template.yaml"
VOLUMES_FILE = K8S / "volumes.yaml"
INIT_JOB_FILE = K8S / "nightly-init-job.yaml"
MANIFEST_FILES = (SETTINGS_FILE, SECRETS_FILE, VOLUMES_FILE, INIT_JOB_FILE)
CHART_VALUES_SCHEMA_FILE = Path(__file__).parent / "data" / "k8s" / "dagster_chart_values.schema.json"

# The chart is versioned with dagster: chart 1.13.27 is dagster 1.13.27 (and its image tags).
CHART_VERSION = "1.13.27"
# The Kubernetes version the manifests are validated against (kubernetes-validate's schemas).
K8S_VERSION = "1.31"

POSTGRES_SECRET_KEY = "postgresql-password"  # the chart's key in global.postgresqlSecretName


# -- the values and the manifests ------------------------------------------------------------------


def load_documents(path: Path) -> list[dict[str, Any]]:
    documents = [doc for doc in yaml.safe_load_all(path.read_text()) if doc is not None]
    assert all(isinstance(doc, dict) for doc in documents), f"{path}: every document must be a mapping"
    return documents


def load_values() -> dict[str, Any]:
    values = yaml.safe_load(VALUES_FILE.read_text())
    assert isinstance(values, dict), f"{VALUES_FILE}: expected a mapping"
    return values


def load_manifest(path: Path, kind: str, name: str) -> dict[str, Any]:
    found = [d for d in load_documents(path) if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(found) == 1, f"{path}: expected one {kind} {name}, found {len(found)}"
    return found[0]


def load_manifests() -> list[dict[str, Any]]:
    """Every document of every manifest in deploy/k8s/."""
    return [document for path in MANIFEST_FILES for document in load_documents(path)]


def user_deployment(values: dict[str, Any]) -> dict[str, Any]:
    deployments = values["dagster-user-deployments"]["deployments"]
    assert len(deployments) == 1, "one code location: nightly_assets"
    return deployments[0]


def run_launcher(values: dict[str, Any]) -> dict[str, Any]:
    return values["runLauncher"]["config"]["k8sRunLauncher"]


def containers(manifest: dict[str, Any]) -> list[dict[str, Any]]:
    """The containers of a manifest's Pod spec (a Pod's, or a Job's template's); none for others."""
    spec = manifest.get("spec") or {}
    pod_spec = spec.get("template", {}).get("spec", spec)
    return list(pod_spec.get("containers") or [])


# -- kubernetes-validate ---------------------------------------------------------------------------


def validate_k8s(manifest: dict[str, Any]) -> None:
    """kubernetes-validate, strict: a field the schema does not know is an error too."""
    kubernetes_validate.validate(manifest, K8S_VERSION, strict=True)


def k8s_errors(manifest: dict[str, Any]) -> str | None:
    try:
        validate_k8s(manifest)
    except kubernetes_validate.ValidationError as exc:
        return f"{'.'.join(str(p) for p in exc.path)}: {exc.message}"
    return None


# -- the values' structure -------------------------------------------------------------------------

# What the values use of the chart's values schema: see the file's "$comment".
CHART_VALUES: dict[str, Any] = json.loads(CHART_VALUES_SCHEMA_FILE.read_text())


def structure_errors(values: dict[str, Any]) -> list[str]:
    validator = jsonschema.Draft202012Validator(CHART_VALUES)
    return [
        f"{'.'.join(str(p) for p in error.absolute_path) or '<top>'}: {error.message}"
        for error in validator.iter_errors(values)
    ]


# -- the Pods the values make ----------------------------------------------------------------------


def env_list(env: Any) -> list[dict[str, Any]]:
    if isinstance(env, dict):  # the chart also takes {NAME: value}
        return [{"name": name, "value": value} for name, value in env.items()]
    return list(env or [])


def build_pod(name: str, image: str, part: dict[str, Any], *, env_vars: list[str] = ()) -> dict[str, Any]:  # type: ignore[assignment]
    """The Pod the chart makes of a component's values: its container's env (and `NAME=value`
    envVars of the run launcher), envFrom of its ConfigMaps and Secrets, volumes and mounts."""
    env = env_list(part.get("env"))
    for entry in env_vars:
        key, sep, value = entry.partition("=")
        env.append({"name": key, "value": value} if sep else {"name": key})
    env_from = [{"configMapRef": ref} for ref in part.get("envConfigMaps") or []]
    env_from += [{"secretRef": ref} for ref in part.get("envSecrets") or []]
    container: dict[str, Any] = {"name": name, "image": image}
    for key, field in (("env", env), ("envFrom", env_from)):
        if field:
            container[key] = field
    if part.get("volumeMounts"):
        container["volumeMounts"] = part["volumeMounts"]
    if part.get("resources"):
        container["resources"] = part["resources"]
    spec: dict[str, Any] = {"containers": [container]}
    if part.get("volumes"):
        spec["volumes"] = part["volumes"]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def build_pods(values: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The Pods of the webserver, the daemon, the code server (user deployment) and a run."""
    deployment = user_deployment(values)
    image = f"{deployment['image']['repository']}:{deployment['image']['tag']}"
    launcher = run_launcher(values)
    # A run pod: the launcher's own settings plus the user deployment's (includeConfigInLaunchedRuns).
    inherited = deployment if deployment.get("includeConfigInLaunchedRuns", {}).get("enabled") else {}
    run_part = {
        "env": env_list(inherited.get("env")),
        "envConfigMaps": [*(launcher.get("envConfigMaps") or []), *(inherited.get("envConfigMaps") or [])],
        "envSecrets": [*(launcher.get("envSecrets") or []), *(inherited.get("envSecrets") or [])],
        "volumes": [*(launcher.get("volumes") or []), *(inherited.get("volumes") or [])],
        "volumeMounts": [*(launcher.get("volumeMounts") or []), *(inherited.get("volumeMounts") or [])],
    }
    return {
        "webserver": build_pod("dagster-webserver", "dagster/dagster-celery-k8s", values["dagsterWebserver"]),
        "daemon": build_pod("dagster-daemon", "dagster/dagster-celery-k8s", values["dagsterDaemon"]),
        "user-deployment": build_pod(deployment["name"], image, deployment),
        "run": build_pod("dagster-run", image, run_part, env_vars=launcher.get("envVars") or []),
    }


# -- settings: what reaches the code server and the run pods ---------------------------------------


def k8s_setting_names(values: dict[str, Any], manifests: list[dict[str, Any]]) -> dict[str, set[str]]:
    """Per component (user deployment, run pod), the variable names it gets from the values and the
    ConfigMaps/Secrets they name (an envFrom source that is not in deploy/k8s/ is an error)."""
    by_name = {(m["kind"], m["metadata"]["name"]): m for m in manifests}

    def names(part: dict[str, Any], env_vars: list[str] = ()) -> set[str]:  # type: ignore[assignment]
        found = {entry["name"] for entry in env_list(part.get("env"))}
        found |= {entry.split("=", 1)[0] for entry in env_vars}
        for kind, key, field in (
            ("ConfigMap", "envConfigMaps", "data"),
            ("Secret", "envSecrets", "stringData"),
        ):
            for ref in part.get(key) or []:
                manifest = by_name.get((kind, ref["name"]))
                assert manifest is not None, f"{key} names {ref['name']}, which deploy/k8s/ does not define"
                found |= set(manifest.get(field) or {})
        return found

    deployment = user_deployment(values)
    launcher = run_launcher(values)
    run = names(launcher, launcher.get("envVars") or [])
    if deployment.get("includeConfigInLaunchedRuns", {}).get("enabled"):
        run |= names(deployment)
    return {"user deployment": names(deployment), "run pods": run}


# -- the instance the chart writes -----------------------------------------------------------------


def chart_instance(values: dict[str, Any]) -> dict[str, Any]:
    """What the chart's instance ConfigMap (dagster.yaml) holds for the keys these values set,
    following the chart's templates (helm/dagster/templates/helpers/instance/*.tpl). Not a render:
    keys these values leave at the chart's defaults (scheduler, retention, ...) are left out."""
    postgresql = values["postgresql"]
    postgres_db = {
        "username": postgresql["postgresqlUsername"],
        "password": {"env": "DAGSTER_PG_PASSWORD"},
        "hostname": postgresql["postgresqlHost"],
        "db_name": postgresql["postgresqlDatabase"],
        "port": postgresql["service"]["port"],
        "params": postgresql.get("postgresqlParams") or {},
    }
    if postgresql.get("postgresqlScheme"):
        postgres_db["scheme"] = postgresql["postgresqlScheme"]
    launcher = run_launcher(values)
    daemon = values["dagsterDaemon"]
    coordinator = daemon["runCoordinator"]["config"]["queuedRunCoordinator"]
    concurrency = values["concurrency"]
    coordinator_config = {}
    if not concurrency["enabled"] or coordinator.get("maxConcurrentRuns") is not None:
        coordinator_config["max_concurrent_runs"] = coordinator.get("maxConcurrentRuns", -1)
    monitoring = daemon["runMonitoring"]
    retries = daemon["runRetries"]
    custom_logs = values["computeLogManager"]["config"]["customComputeLogManager"]
    instance: dict[str, Any] = {
        "storage": {"postgres": {"postgres_db": postgres_db}},
        "run_launcher": {
            "module": "dagster_k8s",
            "class": "K8sRunLauncher",
            "config": {
                "load_incluster_config": launcher["loadInclusterConfig"],
                "image_pull_policy": launcher["imagePullPolicy"],
                "instance_config_map": f"{values['fullnameOverride']}-instance",
                "postgres_password_secret": values["global"]["postgresqlSecretName"],
                "env_config_maps": [
                    f"{values['fullnameOverride']}-pipeline-env",
                    *(ref["name"] for ref in launcher["envConfigMaps"]),
                ],
                "env_secrets": [ref["name"] for ref in launcher["envSecrets"]],
                "env_vars": launcher["envVars"],
                "volume_mounts": launcher["volumeMounts"],
                "volumes": launcher["volumes"],
            },
        },
        "run_coordinator": {
            "module": "dagster.core.run_coordinator",
            "class": "QueuedRunCoordinator",
            **({"config": coordinator_config} if coordinator_config else {}),
        },
        "compute_logs": {k: custom_logs[k] for k in ("module", "class", "config")},
        "run_monitoring": {
            "enabled": monitoring["enabled"],
            "start_timeout_seconds": monitoring["startTimeoutSeconds"],
            "cancel_timeout_seconds": monitoring["cancelTimeoutSeconds"],
            "max_resume_run_attempts": monitoring["maxResumeRunAttempts"],
            "poll_interval_seconds": monitoring["pollIntervalSeconds"],
        },
        "run_retries": {
            "enabled": retries["enabled"],
            "max_retries": retries["maxRetries"],
            "retry_on_asset_or_op_failure": retries["retryOnAssetOrOpFailure"],
        },
        "telemetry": {"enabled": values["telemetry"]["enabled"]},
    }
    if concurrency["enabled"]:
        pools, runs = concurrency["pools"], concurrency["runs"]
        instance["concurrency"] = {
            "pools": {"default_limit": pools["defaultLimit"], "granularity": pools["granularity"]},
            "runs": {"max_concurrent_runs": runs["maxConcurrentRuns"]},
        }
    overlap = set(instance) & set(values.get("additionalInstanceConfig") or {})
    assert not overlap, f"additionalInstanceConfig repeats what the chart writes: {sorted(overlap)}"
    instance.update(values.get("additionalInstanceConfig") or {})
    return instance


# -- editing a copy of the values ------------------------------------------------------------------
# Each returns a mutation named after what it does (the tests' parametrize ids): `path` is dotted,
# a number indexes a list.


def set_at(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def mutate(values: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node: Any = values
        for key in parents:
            node = node[int(key)] if isinstance(node, list) else node[key]
        node[last] = value

    mutate.__name__ = f"{path}={value!r}"
    return mutate


def rename_at(path: str, new: str) -> Callable[[dict[str, Any]], None]:
    def mutate(values: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node: Any = values
        for key in parents:
            node = node[int(key)] if isinstance(node, list) else node[key]
        node[new] = node.pop(last)

    mutate.__name__ = f"{path}->{new}"
    return mutate


def drop_at(path: str) -> Callable[[dict[str, Any]], None]:
    def mutate(values: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node: Any = values
        for key in parents:
            node = node[int(key)] if isinstance(node, list) else node[key]
        del node[last]

    mutate.__name__ = f"-{path}"
    return mutate
