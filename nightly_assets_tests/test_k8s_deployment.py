"""The Kubernetes deployment: deploy/k8s/ (Helm values of dagster/dagster, the manifests beside them).

There is no Kubernetes API server and no helm binary here, so nothing is installed or rendered:

* every manifest in deploy/k8s/ is validated with kubernetes-validate's strict schemas of a pinned
  Kubernetes version (unknown fields, wrong types and missing required fields are refused);
* the Kubernetes objects inside the Helm values (env, envFrom sources, volumes, volume mounts) are
  put into the Pods the chart makes of them and validated the same way;
* the values' own structure is checked against CHART_VALUES, a transcription of the parts of the
  chart's values schema that these values use (the chart's values.schema.json itself could not be
  fetched: see deploy/README.md), closed where the chart's is, so a misspelt key is refused;
* the instance the chart writes from these values (the keys this project sets) is checked by
  Dagster's own instance-config loader against deploy/dagster.yaml, and the `nightly init` Job's
  command is run with it against the PostgreSQL peer.

Each check is also shown to refuse a broken copy of the files.
"""

from __future__ import annotations

import copy
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml
from dagster import DagsterInstance
from dagster._core.instance.config import dagster_instance_config

from nightly_assets.catalog.loader import load_catalog
from nightly_assets.resources import resources_for
from nightly_assets.settings import env_var_names
from nightly_assets_tests import test_deployment as compose
from nightly_assets_tests.test_deployment import postgres_database  # noqa: F401  (the PostgreSQL peer)

ROOT = Path(__file__).resolve().parents[1]
K8S = ROOT / "deploy" / "k8s"
VALUES_FILE = K8S / "values.yaml"
SETTINGS_FILE = K8S / "nightly-settings.yaml"
SECRETS_FILE = K8S / "secrets.template.yaml"
VOLUMES_FILE = K8S / "volumes.yaml"
INIT_JOB_FILE = K8S / "nightly-init-job.yaml"
MANIFEST_FILES = (SETTINGS_FILE, SECRETS_FILE, VOLUMES_FILE, INIT_JOB_FILE)

# The chart is versioned with dagster: chart 1.13.27 is dagster 1.13.27 (and its image tags).
CHART_VERSION = "1.13.27"
# The Kubernetes version the manifests are validated against (kubernetes-validate's schemas).
K8S_VERSION = "1.31"

SETTINGS_CONFIGMAP = "nightly-settings"
SECRETS_SECRET = "nightly-secrets"
POSTGRES_SECRET = "dagster-postgresql-secret"
POSTGRES_SECRET_KEY = "postgresql-password"  # the chart's key in global.postgresqlSecretName
# The code location's secrets: compose's, less the database password (the chart's own Secret),
# with the tokens that compose passes as plain settings.
K8S_SECRET_VARS = (
    *(name for name in compose.SECRET_VARS if name != "DAGSTER_POSTGRES_PASSWORD"),
    "NIGHTLY_GITHUB_TOKEN",
    "NIGHTLY_RBE_TOKEN",
    "NIGHTLY_K8S_TOKEN",
)
# Compose settings that Kubernetes does without: the chart configures the instance's database
# itself (DAGSTER_PG_PASSWORD from the Secret, host and user from the values).
COMPOSE_ONLY = {
    "DAGSTER_POSTGRES_USER",
    "DAGSTER_POSTGRES_PASSWORD",
    "DAGSTER_POSTGRES_HOST",
    "DAGSTER_POSTGRES_DB",
}


def _documents(path: Path) -> list[dict[str, Any]]:
    documents = [doc for doc in yaml.safe_load_all(path.read_text()) if doc is not None]
    assert all(isinstance(doc, dict) for doc in documents), f"{path}: every document must be a mapping"
    return documents


def _values() -> dict[str, Any]:
    values = yaml.safe_load(VALUES_FILE.read_text())
    assert isinstance(values, dict), f"{VALUES_FILE}: expected a mapping"
    return values


def _manifest(path: Path, kind: str, name: str) -> dict[str, Any]:
    found = [d for d in _documents(path) if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(found) == 1, f"{path}: expected one {kind} {name}, found {len(found)}"
    return found[0]


def _user_deployment(values: dict[str, Any]) -> dict[str, Any]:
    deployments = values["dagster-user-deployments"]["deployments"]
    assert len(deployments) == 1, "one code location: nightly_assets"
    return deployments[0]


def _launcher(values: dict[str, Any]) -> dict[str, Any]:
    return values["runLauncher"]["config"]["k8sRunLauncher"]


def _validate_k8s(manifest: dict[str, Any]) -> None:
    """kubernetes-validate, strict: a field the schema does not know is an error too."""
    kubernetes_validate.validate(manifest, K8S_VERSION, strict=True)


def _k8s_errors(manifest: dict[str, Any]) -> str | None:
    try:
        _validate_k8s(manifest)
    except kubernetes_validate.ValidationError as exc:
        return f"{'.'.join(str(p) for p in exc.path)}: {exc.message}"
    return None


# -- the manifests ---------------------------------------------------------------------------------


@pytest.mark.parametrize("path", MANIFEST_FILES, ids=lambda p: p.name)
def test_every_manifest_is_valid_kubernetes(path: Path) -> None:
    documents = _documents(path)
    assert documents, f"{path}: no manifest"
    for document in documents:
        error = _k8s_errors(document)
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
    documents = _documents(path)
    breaks(documents)
    errors = [_k8s_errors(document) for document in documents]
    assert any(errors), f"kubernetes-validate accepted a broken {path.name}"


# -- the Helm values: structure --------------------------------------------------------------------

_IMAGE = {
    "type": "object",
    "properties": {
        "repository": {"type": "string", "minLength": 1},
        "tag": {"type": ["string", "null"]},
        "pullPolicy": {"enum": ["Always", "IfNotPresent", "Never"]},
    },
    "required": ["repository"],
    "additionalProperties": False,
}
_LIST = {"type": "array"}
_MAP = {"type": "object"}
_NAME_REF = {
    "type": "array",
    "items": {
        "type": "object",
        "properties": {"name": {"type": "string", "minLength": 1}, "optional": {"type": "boolean"}},
        "required": ["name"],
        "additionalProperties": False,
    },
}
_ENV = {"anyOf": [{"type": "object", "additionalProperties": {"type": "string"}}, {"type": "array"}]}
_POD_PARTS = {
    "env": _ENV,
    "envConfigMaps": _NAME_REF,
    "envSecrets": _NAME_REF,
    "volumes": _LIST,
    "volumeMounts": _LIST,
    "labels": _MAP,
    "deploymentLabels": _MAP,
    "annotations": _MAP,
    "nodeSelector": _MAP,
    "affinity": _MAP,
    "tolerations": _LIST,
    "podSecurityContext": _MAP,
    "securityContext": _MAP,
    "resources": _MAP,
    "livenessProbe": _MAP,
    "readinessProbe": _MAP,
    "startupProbe": _MAP,
    "schedulerName": {"type": "string"},
    "image": _IMAGE,
}
_CONFIGURABLE_CLASS = {
    "type": "object",
    "properties": {"module": {"type": "string"}, "class": {"type": "string"}, "config": _MAP},
    "required": ["module", "class", "config"],
    "additionalProperties": False,
}
_INT_OR_NULL = {"type": ["integer", "null"]}

# What the values use of the chart's values schema (dagster/dagster 1.13.27: its pydantic models
# under helm/dagster/schema), written out here because the chart's own values.schema.json could not
# be fetched. Objects are closed (additionalProperties false) where the chart's models forbid extra
# keys; the top level lists the chart's top-level keys.
CHART_VALUES: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "nameOverride": {"type": "string"},
        "fullnameOverride": {"type": "string", "minLength": 1},
        "rbacEnabled": {"type": "boolean"},
        "global": {
            "type": "object",
            "properties": {
                "postgresqlSecretName": {"type": "string", "minLength": 1},
                "dagsterHome": {"type": "string"},
                "serviceAccountName": {"type": "string"},
                "celeryConfigSecretName": {"type": "string"},
            },
            "additionalProperties": False,
        },
        "imagePullSecrets": _NAME_REF,
        "postgresql": {
            "type": "object",
            "properties": {
                "image": _MAP,
                "enabled": {"type": "boolean"},
                "postgresqlHost": {"type": "string", "minLength": 1},
                "postgresqlUsername": {"type": "string", "minLength": 1},
                "postgresqlPassword": {"type": "string"},
                "postgresqlDatabase": {"type": "string", "minLength": 1},
                "postgresqlParams": _MAP,
                "postgresqlScheme": {"type": "string"},
                "service": {
                    "type": "object",
                    "properties": {"port": {"type": "integer"}},
                    "required": ["port"],
                    "additionalProperties": False,
                },
            },
            "additionalProperties": False,
        },
        "generatePostgresqlPasswordSecret": {"type": "boolean"},
        "generateCeleryConfigSecret": {"type": "boolean"},
        "dagsterWebserver": {
            "type": "object",
            "properties": {
                **_POD_PARTS,
                "replicaCount": {"type": "integer", "minimum": 0},
                "nameOverride": {"type": "string"},
                "pathPrefix": {"type": "string"},
                "service": _MAP,
                "workspace": {
                    "type": "object",
                    "properties": {
                        "enabled": {"type": "boolean"},
                        "servers": {
                            "type": "array",
                            "items": {
                                "type": "object",
                                "properties": {
                                    "host": {"type": "string", "minLength": 1},
                                    "port": {"type": "integer"},
                                    "name": {"type": "string"},
                                    "ssl": {"type": "boolean"},
                                },
                                "required": ["host", "port"],
                                "additionalProperties": False,
                            },
                        },
                        "externalConfigmap": {"type": ["string", "null"]},
                    },
                    "required": ["enabled", "servers"],
                    "additionalProperties": False,
                },
                "enableReadOnly": {"type": "boolean"},
                "dbStatementTimeout": {"type": "integer"},
                "dbPoolRecycle": {"type": "integer"},
                "logLevel": {"type": "string"},
            },
            "additionalProperties": False,
        },
        "dagster-user-deployments": {
            "type": "object",
            "properties": {
                "enabled": {"type": "boolean"},
                "enableSubchart": {"type": "boolean"},
                "imagePullSecrets": _NAME_REF,
                "deployments": {
                    "type": "array",
                    "minItems": 1,
                    "items": {
                        "type": "object",
                        "properties": {
                            **_POD_PARTS,
                            "name": {"type": "string", "pattern": "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"},
                            "image": {**_IMAGE, "required": ["repository", "tag", "pullPolicy"]},
                            "dagsterApiGrpcArgs": {"type": "array", "items": {"type": "string"}},
                            "codeServerArgs": {"type": "array", "items": {"type": "string"}},
                            "includeConfigInLaunchedRuns": {
                                "type": "object",
                                "properties": {"enabled": {"type": "boolean"}},
                                "required": ["enabled"],
                                "additionalProperties": False,
                            },
                            "port": {"type": "integer", "minimum": 1, "maximum": 65535},
                            "service": _MAP,
                        },
                        "required": ["name", "image", "port"],
                        "additionalProperties": False,
                    },
                },
            },
            "required": ["enabled", "enableSubchart", "deployments"],
            "additionalProperties": False,
        },
        "runLauncher": {
            "type": "object",
            "properties": {
                "type": {"enum": ["CeleryK8sRunLauncher", "K8sRunLauncher", "CustomRunLauncher"]},
                "config": {
                    "type": "object",
                    "properties": {
                        "k8sRunLauncher": {
                            "type": "object",
                            "properties": {
                                "image": _IMAGE,
                                "imagePullPolicy": {"enum": ["Always", "IfNotPresent", "Never"]},
                                "jobNamespace": {"type": ["string", "null"]},
                                "loadInclusterConfig": {"type": "boolean"},
                                "kubeconfigFile": {"type": ["string", "null"]},
                                "envConfigMaps": _NAME_REF,
                                "envSecrets": _NAME_REF,
                                "envVars": {"type": "array", "items": {"type": "string"}},
                                "volumeMounts": _LIST,
                                "volumes": _LIST,
                                "labels": _MAP,
                                "failPodOnRunFailure": {"type": "boolean"},
                                "resources": _MAP,
                                "schedulerName": {"type": "string"},
                                "securityContext": _MAP,
                                "runK8sConfig": _MAP,
                            },
                            "additionalProperties": False,
                        },
                        "celeryK8sRunLauncher": _MAP,
                        "customRunLauncher": _CONFIGURABLE_CLASS,
                    },
                    "additionalProperties": False,
                },
            },
            "required": ["type", "config"],
            "additionalProperties": False,
            "if": {"properties": {"type": {"const": "K8sRunLauncher"}}},
            "then": {"properties": {"config": {"required": ["k8sRunLauncher"]}}},
        },
        "computeLogManager": {
            "type": "object",
            "properties": {
                "type": {
                    "enum": [
                        "NoOpComputeLogManager",
                        "AzureBlobComputeLogManager",
                        "GCSComputeLogManager",
                        "S3ComputeLogManager",
                        "CustomComputeLogManager",
                    ]
                },
                "config": {
                    "type": "object",
                    "properties": {
                        "azureBlobComputeLogManager": _MAP,
                        "gcsComputeLogManager": _MAP,
                        "s3ComputeLogManager": _MAP,
                        "customComputeLogManager": _CONFIGURABLE_CLASS,
                    },
                    "additionalProperties": False,
                },
            },
            "required": ["type", "config"],
            "additionalProperties": False,
            "if": {"properties": {"type": {"const": "CustomComputeLogManager"}}},
            "then": {"properties": {"config": {"required": ["customComputeLogManager"]}}},
        },
        "dagsterDaemon": {
            "type": "object",
            "properties": {
                **_POD_PARTS,
                "enabled": {"type": "boolean"},
                "heartbeatTolerance": {"type": "integer"},
                "runCoordinator": {
                    "type": "object",
                    "properties": {
                        "enabled": {"type": "boolean"},
                        "type": {"enum": ["QueuedRunCoordinator", "CustomRunCoordinator"]},
                        "config": {
                            "type": "object",
                            "properties": {
                                "queuedRunCoordinator": {
                                    "type": "object",
                                    "properties": {
                                        "maxConcurrentRuns": _INT_OR_NULL,
                                        "tagConcurrencyLimits": _LIST,
                                        "dequeueIntervalSeconds": _INT_OR_NULL,
                                        "dequeueNumWorkers": _INT_OR_NULL,
                                        "dequeueUseThreads": {"type": "boolean"},
                                        "blockOpConcurrencyLimitedRuns": _MAP,
                                    },
                                    "additionalProperties": False,
                                },
                                "customRunCoordinator": _CONFIGURABLE_CLASS,
                            },
                        },
                    },
                    "required": ["enabled", "type", "config"],
                    "additionalProperties": False,
                },
                "runMonitoring": {
                    "type": "object",
                    "properties": {
                        "enabled": {"type": "boolean"},
                        "startTimeoutSeconds": {"type": "integer"},
                        "cancelTimeoutSeconds": {"type": "integer"},
                        "maxResumeRunAttempts": {"type": "integer"},
                        "pollIntervalSeconds": {"type": "integer"},
                        "freeSlotsAfterRunEndSeconds": {"type": "integer"},
                    },
                    "additionalProperties": False,
                },
                "runRetries": {
                    "type": "object",
                    "properties": {
                        "enabled": {"type": "boolean"},
                        "maxRetries": {"type": "integer", "minimum": 0},
                        "retryOnAssetOrOpFailure": {"type": "boolean"},
                    },
                    "additionalProperties": False,
                },
                "sensors": _MAP,
                "schedules": _MAP,
            },
            "additionalProperties": False,
        },
        "concurrency": {
            "type": "object",
            "properties": {
                "enabled": {"type": "boolean"},
                "pools": {
                    "type": "object",
                    "properties": {
                        "defaultLimit": _INT_OR_NULL,
                        "granularity": {"enum": ["run", "op", None]},
                        "opGranularityRunBuffer": _INT_OR_NULL,
                    },
                    "additionalProperties": False,
                },
                "runs": {
                    "type": "object",
                    "properties": {"maxConcurrentRuns": _INT_OR_NULL, "tagConcurrencyLimits": _LIST},
                    "additionalProperties": False,
                },
            },
            "additionalProperties": False,
        },
        "additionalInstanceConfig": _MAP,
        "telemetry": {
            "type": "object",
            "properties": {"enabled": {"type": "boolean"}},
            "additionalProperties": False,
        },
        # Chart keys these values leave at their defaults.
        "pythonLogs": _MAP,
        "scheduler": _MAP,
        "rabbitmq": _MAP,
        "redis": _MAP,
        "flower": _MAP,
        "ingress": _MAP,
        "busybox": _MAP,
        "migrate": _MAP,
        "serviceAccount": _MAP,
        "retention": _MAP,
        "defsStateStorage": _MAP,
    },
}


def _structure_errors(values: dict[str, Any]) -> list[str]:
    validator = jsonschema.Draft202012Validator(CHART_VALUES)
    return [
        f"{'.'.join(str(p) for p in error.absolute_path) or '<top>'}: {error.message}"
        for error in validator.iter_errors(values)
    ]


def test_the_chart_values_schema_is_a_valid_json_schema() -> None:
    jsonschema.Draft202012Validator.check_schema(CHART_VALUES)


def test_values_fit_the_chart_structure() -> None:
    errors = _structure_errors(_values())
    assert not errors, "deploy/k8s/values.yaml:\n" + "\n".join(errors)


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def mutate(values: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node: Any = values
        for key in parents:
            node = node[int(key)] if isinstance(node, list) else node[key]
        node[last] = value

    mutate.__name__ = f"{path}={value!r}"
    return mutate


def _rename(path: str, new: str) -> Callable[[dict[str, Any]], None]:
    def mutate(values: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node: Any = values
        for key in parents:
            node = node[int(key)] if isinstance(node, list) else node[key]
        node[new] = node.pop(last)

    mutate.__name__ = f"{path}->{new}"
    return mutate


def _drop(path: str) -> Callable[[dict[str, Any]], None]:
    def mutate(values: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node: Any = values
        for key in parents:
            node = node[int(key)] if isinstance(node, list) else node[key]
        del node[last]

    mutate.__name__ = f"-{path}"
    return mutate


@pytest.mark.parametrize(
    "mutate",
    [
        _rename("runLauncher.config.k8sRunLauncher.envSecrets", "envSecret"),
        _rename("dagsterDaemon.runRetries", "runRetry"),
        _set("runLauncher.type", "K8sLauncher"),
        _drop("runLauncher.config.k8sRunLauncher"),
        _set("dagsterDaemon.runRetries.maxRetries", "2"),
        _set("concurrency.pools.granularity", "step"),
        _drop("dagster-user-deployments.deployments.0.image"),
        _set("dagster-user-deployments.deployments.0.name", "nightly_assets"),
        _set("dagster-user-deployments.deployments.0.envSecrets", ["nightly-secrets"]),
        _set("computeLogManager.config", {}),
        _set("imagePullSecret", []),
    ],
    ids=lambda m: m.__name__,
)
def test_a_value_the_chart_would_refuse_is_caught(mutate: Callable[[dict[str, Any]], None]) -> None:
    values = _values()
    mutate(values)
    assert _structure_errors(values), f"{mutate.__name__} was accepted"


# -- the Helm values: the Pods they make ----------------------------------------------------------


def _env_list(env: Any) -> list[dict[str, Any]]:
    if isinstance(env, dict):  # the chart also takes {NAME: value}
        return [{"name": name, "value": value} for name, value in env.items()]
    return list(env or [])


def _pod(name: str, image: str, part: dict[str, Any], *, env_vars: list[str] = ()) -> dict[str, Any]:  # type: ignore[assignment]
    """The Pod the chart makes of a component's values: its container's env (and `NAME=value`
    envVars of the run launcher), envFrom of its ConfigMaps and Secrets, volumes and mounts."""
    env = _env_list(part.get("env"))
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


def _pods(values: dict[str, Any]) -> dict[str, dict[str, Any]]:
    deployment = _user_deployment(values)
    image = f"{deployment['image']['repository']}:{deployment['image']['tag']}"
    launcher = _launcher(values)
    # A run pod: the launcher's own settings plus the user deployment's (includeConfigInLaunchedRuns).
    inherited = deployment if deployment.get("includeConfigInLaunchedRuns", {}).get("enabled") else {}
    run_part = {
        "env": _env_list(inherited.get("env")),
        "envConfigMaps": [*(launcher.get("envConfigMaps") or []), *(inherited.get("envConfigMaps") or [])],
        "envSecrets": [*(launcher.get("envSecrets") or []), *(inherited.get("envSecrets") or [])],
        "volumes": [*(launcher.get("volumes") or []), *(inherited.get("volumes") or [])],
        "volumeMounts": [*(launcher.get("volumeMounts") or []), *(inherited.get("volumeMounts") or [])],
    }
    return {
        "webserver": _pod("dagster-webserver", "dagster/dagster-celery-k8s", values["dagsterWebserver"]),
        "daemon": _pod("dagster-daemon", "dagster/dagster-celery-k8s", values["dagsterDaemon"]),
        "user-deployment": _pod(deployment["name"], image, deployment),
        "run": _pod("dagster-run", image, run_part, env_vars=launcher.get("envVars") or []),
    }


def _pod_problems(values: dict[str, Any]) -> list[str]:
    problems = []
    for component, pod in _pods(values).items():
        error = _k8s_errors(pod)
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
    problems = _pod_problems(_values())
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize(
    "mutate",
    [
        _drop("dagster-user-deployments.deployments.0.volumeMounts.0.mountPath"),
        _set("dagster-user-deployments.deployments.0.env", [{"name": "NIGHTLY_ENV", "valu": "prod"}]),
        _set("dagsterDaemon.volumes.0.persistentVolumeClaim", {"claim": "nightly-data"}),
        _set("dagsterWebserver.volumeMounts.0.name", "compute-logs"),
        _set("runLauncher.config.k8sRunLauncher.volumes", [{"name": "nightly-data", "emptyDir": {}}]),
    ],
    ids=lambda m: m.__name__,
)
def test_a_pod_kubernetes_would_refuse_is_caught(mutate: Callable[[dict[str, Any]], None]) -> None:
    values = _values()
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
        for container in _containers(manifest):
            problems += _env_problems(f"{kind} {name}", container.get("env"), secret_names)
    postgresql = values["postgresql"]
    if postgresql.get("postgresqlPassword"):
        problems.append("values: postgresql.postgresqlPassword has a value")
    if values.get("generatePostgresqlPasswordSecret", True):
        problems.append("values: generatePostgresqlPasswordSecret would make the chart write the password")
    for where, part in (
        ("dagsterWebserver", values["dagsterWebserver"]),
        ("dagsterDaemon", values["dagsterDaemon"]),
        ("user deployment", _user_deployment(values)),
    ):
        problems += _env_problems(where, part.get("env"), secret_names)
    for entry in _launcher(values).get("envVars") or []:
        key, sep, value = entry.partition("=")
        if key in secret_names and sep:
            problems.append(f"runLauncher envVars: {key} is set to a value")
    return problems


def _containers(manifest: dict[str, Any]) -> list[dict[str, Any]]:
    spec = manifest.get("spec") or {}
    pod_spec = spec.get("template", {}).get("spec", spec)
    return list(pod_spec.get("containers") or [])


def _env_problems(where: str, env: Any, secret_names: set[str]) -> list[str]:
    problems = []
    for entry in _env_list(env):
        if entry["name"] in secret_names:
            if "value" in entry:
                problems.append(f"{where}: {entry['name']} is a literal value")
            elif "secretKeyRef" not in (entry.get("valueFrom") or {}):
                problems.append(f"{where}: {entry['name']} does not come from a Secret")
    return problems


def _all_manifests() -> list[dict[str, Any]]:
    return [document for path in MANIFEST_FILES for document in _documents(path)]


def test_secrets_are_only_referenced() -> None:
    problems = _secret_problems(_values(), _all_manifests())
    assert not problems, "\n".join(problems)
    secret = _manifest(SECRETS_FILE, "Secret", SECRETS_SECRET)
    assert set(secret["stringData"]) == set(K8S_SECRET_VARS)
    values = _values()
    assert values["global"]["postgresqlSecretName"] == POSTGRES_SECRET
    assert set(_manifest(SECRETS_FILE, "Secret", POSTGRES_SECRET)["stringData"]) == {POSTGRES_SECRET_KEY}
    for text in (VALUES_FILE.read_text(), *(path.read_text() for path in MANIFEST_FILES)):
        for value in compose._secret_values().values():
            assert value not in text


def _inline_slack_token(values: dict[str, Any], manifests: list[dict[str, Any]]) -> None:
    _user_deployment(values)["env"].append({"name": "SLACK_BOT_TOKEN", "value": "xoxb-1234"})


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
    _launcher(values)["envVars"].append("NIGHTLY_RBE_TOKEN=abc")


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
    values, manifests = _values(), _all_manifests()
    mutate(values, manifests)
    assert _secret_problems(values, manifests), f"{mutate.__name__} was accepted"


# -- settings: what reaches the code server and the run pods ---------------------------------------


def _k8s_setting_names(values: dict[str, Any], manifests: list[dict[str, Any]]) -> dict[str, set[str]]:
    """Per component (user deployment, run pod), the variable names it gets from the values and the
    ConfigMaps/Secrets they name (an envFrom source that is not in deploy/k8s/ is an error)."""
    by_name = {(m["kind"], m["metadata"]["name"]): m for m in manifests}

    def names(part: dict[str, Any], env_vars: list[str] = ()) -> set[str]:  # type: ignore[assignment]
        found = {entry["name"] for entry in _env_list(part.get("env"))}
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

    deployment = _user_deployment(values)
    launcher = _launcher(values)
    run = names(launcher, launcher.get("envVars") or [])
    if deployment.get("includeConfigInLaunchedRuns", {}).get("enabled"):
        run |= names(deployment)
    return {"user deployment": names(deployment), "run pods": run}


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
        for component, got in _k8s_setting_names(values, manifests).items()
        if wanted - got
    ]


def test_every_setting_the_code_reads_reaches_the_code_server_and_the_runs() -> None:
    read = _code_reads()
    assert {"NIGHTLY_RUNNER_POOL", "NIGHTLY_TPU_PROJECT", "NIGHTLY_WAREHOUSE_URL"} <= read
    missing = _missing_settings(_values(), _all_manifests(), read)
    assert not missing, "\n".join(missing)


def test_every_setting_compose_passes_is_passed_on_kubernetes() -> None:
    """Same settings as the docker-compose deployment, less its own database variables."""
    compose_names = set(compose._env_var_names(compose._launcher_config()["env_vars"])) - COMPOSE_ONLY
    missing = _missing_settings(_values(), _all_manifests(), compose_names)
    assert not missing, "\n".join(missing)
    names = _k8s_setting_names(_values(), _all_manifests())
    for component in names:
        assert "NIGHTLY_ENV" in names[component]
    deployment_env = {e["name"]: e.get("value") for e in _env_list(_user_deployment(_values())["env"])}
    assert deployment_env["NIGHTLY_ENV"] == "prod"
    assert "NIGHTLY_ENV=prod" in _launcher(_values())["envVars"]


@pytest.mark.parametrize("env", ["local", "prod"])
def test_every_variable_the_resources_read_reaches_the_runs(
    env: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    with monkeypatch.context() as everything_set:
        everything_set.setattr(os, "environ", compose._EveryVariableSet(os.environ))
        names = env_var_names(resources_for(env, tmp_path))  # type: ignore[arg-type]
    assert {"NIGHTLY_RUNNER_POOL", "NIGHTLY_REGISTRY_ACR_AUTH", "NIGHTLY_BASE_IMAGE_ARM64"} <= names
    missing = _missing_settings(_values(), _all_manifests(), names)
    assert not missing, "\n".join(missing)


def _drop_configmap_key(values: dict[str, Any], manifests: list[dict[str, Any]]) -> None:
    del next(m for m in manifests if m["kind"] == "ConfigMap")["data"]["NIGHTLY_TPU_PROJECT"]


def _drop_secret_source(values: dict[str, Any], manifests: list[dict[str, Any]]) -> None:
    _user_deployment(values)["envSecrets"] = []
    _launcher(values)["envSecrets"] = []


def _runs_without_the_deployment(values: dict[str, Any], manifests: list[dict[str, Any]]) -> None:
    _user_deployment(values)["includeConfigInLaunchedRuns"] = {"enabled": False}
    _launcher(values)["envVars"] = []


@pytest.mark.parametrize(
    "mutate",
    [_drop_configmap_key, _drop_secret_source, _runs_without_the_deployment],
    ids=lambda m: m.__name__,
)
def test_a_setting_left_out_is_caught(mutate: Callable[..., None]) -> None:
    values, manifests = _values(), _all_manifests()
    mutate(values, manifests)
    assert _missing_settings(values, manifests, _code_reads() | {"NIGHTLY_ENV"})


def test_an_env_source_that_is_not_defined_is_caught() -> None:
    values = _values()
    _launcher(values)["envConfigMaps"].append({"name": "nightly-setings"})
    with pytest.raises(AssertionError, match="nightly-setings"):
        _k8s_setting_names(values, _all_manifests())


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
    values = _values()
    pvcs = {doc["metadata"]["name"]: doc for doc in _documents(VOLUMES_FILE)}
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
    deployment = _user_deployment(values)
    assert deployment["includeConfigInLaunchedRuns"]["enabled"], "run pods would not get the volumes"
    run_mounts = {**_mounts(_launcher(values)), **_mounts(deployment)}
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


# -- the instance the chart writes ------------------------------------------------------------------


def _chart_instance(values: dict[str, Any]) -> dict[str, Any]:
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
    launcher = _launcher(values)
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


@pytest.fixture
def pg_password(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("DAGSTER_PG_PASSWORD", "from-the-secret")
    return "from-the-secret"


def _load_instance_config(instance: dict[str, Any], home: Path) -> dict[str, Any]:
    home.mkdir(parents=True, exist_ok=True)
    (home / "dagster.yaml").write_text(yaml.safe_dump(instance, sort_keys=False))
    config, _ = dagster_instance_config(str(home), config_filename="dagster.yaml")
    return config


def test_the_chart_instance_is_valid_and_matches_deploy_yaml(pg_password: str, tmp_path: Path) -> None:
    config = _load_instance_config(_chart_instance(_values()), tmp_path / "home")
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
        _set("dagsterDaemon.runCoordinator.config.queuedRunCoordinator.maxConcurrentRuns", 4),
        _set("dagsterDaemon.runMonitoring.pollIntervalSeconds", "often"),
        _set("additionalInstanceConfig", {"freshnes": {"enabled": True}}),
    ],
    ids=lambda m: m.__name__,
)
def test_an_instance_dagster_would_refuse_is_caught(
    mutate: Callable[[dict[str, Any]], None], pg_password: str, tmp_path: Path
) -> None:
    values = _values()
    mutate(values)
    with pytest.raises(Exception, match=r"(?i)max_concurrent_runs|poll_interval_seconds|freshnes"):
        _load_instance_config(_chart_instance(values), tmp_path / "home")


def test_the_daemon_settings_differ_from_deploy_yaml_when_changed(pg_password: str, tmp_path: Path) -> None:
    values = _values()
    values["dagsterDaemon"]["runRetries"]["maxRetries"] = 5
    config = _load_instance_config(_chart_instance(values), tmp_path / "home")
    assert config["run_retries"] != compose._deploy_config()["run_retries"]


# -- the code server and the init Job ---------------------------------------------------------------


def test_the_code_server_is_the_deploy_dockerfile_image() -> None:
    values = _values()
    deployment = _user_deployment(values)
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


def test_the_init_job_runs_nightly_init_with_the_chart_instance() -> None:
    values = _values()
    job = _manifest(INIT_JOB_FILE, "Job", "nightly-init")
    [container] = _containers(job)
    deployment = _user_deployment(values)
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
    assert f'CHART_VERSION = "{CHART_VERSION}"' in Path(__file__).read_text()
    assert f"--version {CHART_VERSION}" in VALUES_FILE.read_text()


def test_the_chart_version_is_dagsters() -> None:
    import dagster

    assert dagster.__version__ == CHART_VERSION, "move the chart version with dagster (values.yaml, README)"
    assert f"ARG DAGSTER_VERSION={CHART_VERSION}" in (ROOT / "deploy" / "Dockerfile").read_text()
    assert f"--version {CHART_VERSION}" in (ROOT / "deploy" / "README.md").read_text()


def test_the_init_job_command_writes_the_pools(
    postgres_database: str,  # noqa: F811 (the fixture imported above)
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The Job's command, with the instance the chart writes (pointed at the PostgreSQL peer): the
    catalog's pool limits end up in the database the webserver and daemon use."""
    values = _values()
    values["postgresql"].update(
        postgresqlHost=compose.POSTGRES_HOST,
        postgresqlUsername=compose.POSTGRES_ADMIN_USER,
        postgresqlDatabase=postgres_database,
    )
    job = _manifest(INIT_JOB_FILE, "Job", "nightly-init")
    [container] = _containers(job)
    home = tmp_path / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text(yaml.safe_dump(_chart_instance(values), sort_keys=False))
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
    values = copy.deepcopy(_values())
    values["additionalInstanceConfig"]["run_retries"] = {"enabled": False}
    with pytest.raises(AssertionError, match="run_retries"):
        _chart_instance(values)
