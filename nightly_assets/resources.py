"""The two resource sets: `local` does the real work on this machine, `prod` talks to the services.

Each NIGHTLY_* setting reaches its resource field as a `dg.EnvVar` (`env_settings`): the UI and run
config show the variable's name, each run reads its value, and an unset one keeps the default."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import dagster as dg
from dagster_slack import SlackResource

from nightly_assets.artefacts.resources import ArtefactStoreResource
from nightly_assets.batch.resources import BatchSchedulerResource
from nightly_assets.builds.resources import INDEX_URL_VAR, PYPI, WHEELHOUSE_VAR, PythonBuildResource
from nightly_assets.builds.wheelhouse import home_wheelhouse
from nightly_assets.containers.resources import (
    ContainerRegistriesResource,
    DockerRunnerPoolResource,
    RegistryEndpoint,
)
from nightly_assets.github.resources import GitHubResource
from nightly_assets.kubernetes.resources import CLUSTER_VARS, KubernetesClusterResource
from nightly_assets.rbe.remote import RemoteSettings
from nightly_assets.rbe.resources import DEFAULT_MAX_IDLE_SECS, BazelRbeResource
from nightly_assets.release.indexes import INDEX_VARIABLES, LOCAL, PackageIndex
from nightly_assets.release.resources import PackageIndexesResource
from nightly_assets.reporting.mail import MailResource
from nightly_assets.reporting.resources import FileNotifierResource, SlackNotifierResource
from nightly_assets.settings import WAREHOUSE_URL_VAR, Env, env_settings, local_warehouse_url
from nightly_assets.sources.resources import GitSourcesResource
from nightly_assets.testing.resources import LocalTestRunnerResource
from nightly_assets.tpu.resources import TpuVmResource
from nightly_assets.warehouse.resources import WarehouseResource

# `make setup` fills it with the build backends and test tools the sample and fixture nights use.
# An install from the wheel has none: `nightly init` makes $NIGHTLY_HOME/wheelhouse instead.
REPO_WHEELHOUSE = Path(__file__).resolve().parents[1] / ".wheelhouse"
ARTEFACTS_BUCKET_VAR = "NIGHTLY_ARTEFACTS_BUCKET"
# "0" (or false/no/off): the results site is not rebuilt after each night (`nightly site` builds it).
RESULTS_SITE_VAR = "NIGHTLY_RESULTS_SITE"
REGISTRY_ROLES = ("ecr", "acr")


def resources_for(env: Env, home: Path) -> dict[str, Any]:
    # The URL may carry a password: hand Dagster the variable's name, never its value. In prod it
    # is required, so an unset one fails the run naming it rather than falling back to SQLite.
    warehouse_url: Any = (
        dg.EnvVar(WAREHOUSE_URL_VAR)
        if os.environ.get(WAREHOUSE_URL_VAR) or env == "prod"
        else local_warehouse_url(home)
    )
    resources: dict[str, Any] = {
        "git": GitSourcesResource(cache_dir=str(home / "git")),
        "artefacts": artefact_store(env, home),
        "warehouse": WarehouseResource(
            url=warehouse_url, **env_settings(retry_s="NIGHTLY_WAREHOUSE_RETRY_S")
        ),
        "builder": PythonBuildResource(
            **env_settings(
                {
                    "toolchain_dir": str(home / "toolchain"),
                    "uv_cache_dir": str(home / "uv-cache"),  # nights reuse its downloads
                    **local_wheelhouse(env, home),
                },
                index_url=INDEX_URL_VAR,
                wheelhouse=WHEELHOUSE_VAR,
                installer="NIGHTLY_INSTALLER",
                uv_cache_dir="NIGHTLY_UV_CACHE_DIR",
            )
        ),
        "test_runner": LocalTestRunnerResource(),
        "package_index": package_indexes(env, home),
        "notifier": FileNotifierResource(path=str(home / "alerts.jsonl")),
        "docker_pool": DockerRunnerPoolResource(
            **env_settings(pool_file="NIGHTLY_RUNNER_POOL", base_image="NIGHTLY_BASE_IMAGE"),
            base_images=env_settings(amd64="NIGHTLY_BASE_IMAGE_AMD64", arm64="NIGHTLY_BASE_IMAGE_ARM64"),
        ),
        "registries": ContainerRegistriesResource(
            registries=registry_endpoints(),
            **env_settings(backoff_s="NIGHTLY_REGISTRY_BACKOFF_S"),
        ),
        "batch": BatchSchedulerResource(
            **env_settings(
                {"spool_dir": str(home / "batch"), "release_root": str(home / "releases")},
                kind="NIGHTLY_BATCH_KIND",
                spool_dir="NIGHTLY_BATCH_SPOOL",
                release_root="NIGHTLY_RELEASE_ROOT",
                poll_interval_s="NIGHTLY_BATCH_POLL_S",
                queue="NIGHTLY_BATCH_QUEUE",
                account="NIGHTLY_BATCH_ACCOUNT",
                slurm_conf="NIGHTLY_SLURM_CONF",
                unreachable_grace_s="NIGHTLY_BATCH_UNREACHABLE_GRACE_S",
            )
        ),
        "bazel_rbe": BazelRbeResource(
            **env_settings(
                {"output_user_root": str(home / "bazel"), "max_idle_secs": DEFAULT_MAX_IDLE_SECS},
                output_user_root="NIGHTLY_BAZEL_OUTPUT_ROOT",
                max_idle_secs="NIGHTLY_BAZEL_MAX_IDLE_SECS",
                host_jvm_options="NIGHTLY_BAZEL_JVM_ARGS",
            ),
            remote=RemoteSettings(
                **env_settings(
                    executor="NIGHTLY_RBE_EXECUTOR",
                    cache="NIGHTLY_RBE_CACHE",
                    instance_name="NIGHTLY_RBE_INSTANCE",
                ),
                # A secret: the variable's name, read when Bazel starts.
                header_envs={"authorization": "NIGHTLY_RBE_TOKEN"}
                if os.environ.get("NIGHTLY_RBE_TOKEN")
                else {},
            ),
        ),
        "tpu_vms": TpuVmResource(
            **env_settings(
                project="NIGHTLY_TPU_PROJECT",
                api_endpoint="NIGHTLY_TPU_API_ENDPOINT",
                credentials="NIGHTLY_TPU_CREDENTIALS",
                ssh_user="NIGHTLY_TPU_SSH_USER",
                ssh_port="NIGHTLY_TPU_SSH_PORT",
                remote_root="NIGHTLY_TPU_REMOTE_ROOT",
                poll_interval_s="NIGHTLY_TPU_POLL_S",
                ready_timeout_s="NIGHTLY_TPU_READY_TIMEOUT_S",
                use_queued_resource="NIGHTLY_TPU_QUEUED",
                delete_timeout_s="NIGHTLY_TPU_DELETE_TIMEOUT_S",
                ssh_connect_timeout_s="NIGHTLY_TPU_SSH_CONNECT_TIMEOUT_S",
                create_retry_s="NIGHTLY_TPU_CREATE_RETRY_S",
            )
        ),
        "kubernetes": kubernetes_cluster(env),
        "github": GitHubResource(
            **env_settings(api_url="NIGHTLY_GITHUB_API_URL", token="NIGHTLY_GITHUB_TOKEN")  # noqa: S106  # a name
        ),
    }
    resources["mail"] = MailResource(
        **env_settings(
            host="NIGHTLY_SMTP_HOST",
            port="NIGHTLY_SMTP_PORT",
            starttls="NIGHTLY_SMTP_STARTTLS",
            ca_file="NIGHTLY_SMTP_CA_FILE",
            username="NIGHTLY_SMTP_USERNAME",
            password="NIGHTLY_SMTP_PASSWORD",  # noqa: S106  # a name
            sender="NIGHTLY_SMTP_FROM",
            timeout_s="NIGHTLY_SMTP_TIMEOUT_S",
        )
    )
    if env == "prod":
        resources["notifier"] = SlackNotifierResource(
            slack=SlackResource(token=dg.EnvVar("SLACK_BOT_TOKEN")),
            **env_settings(api_url="NIGHTLY_SLACK_API_URL"),
        )
    return resources


def kubernetes_cluster(env: Env) -> KubernetesClusterResource:
    """The cluster of the kubernetes runners. In `local` with none of CLUSTER_VARS set, their pods'
    containers run on the runner pool's Docker engine instead (stand_in: docker); prod needs one.
    The token goes by the variable's name."""
    local = env == "local" and not any(os.environ.get(name) for name in CLUSTER_VARS)
    return KubernetesClusterResource(
        **env_settings(
            {"stand_in": "docker"} if local else {},
            kubeconfig="NIGHTLY_K8S_KUBECONFIG",
            context="NIGHTLY_K8S_CONTEXT",
            in_cluster="NIGHTLY_K8S_IN_CLUSTER",
            api_url="NIGHTLY_K8S_API_URL",
            token="NIGHTLY_K8S_TOKEN",  # noqa: S106  # a name
            ca_cert="NIGHTLY_K8S_CA_CERT",
            poll_interval_s="NIGHTLY_K8S_POLL_S",
            schedule_timeout_s="NIGHTLY_K8S_SCHEDULE_TIMEOUT_S",
            stand_in="NIGHTLY_K8S_STAND_IN",
        )
    )


def local_wheelhouse(env: Env, home: Path) -> dict[str, str]:
    """Local mode with no index set builds from a wheelhouse first: the source checkout's
    `.wheelhouse` where there is one, else the one `nightly init` made in NIGHTLY_HOME (an install
    from the wheel). It holds what the embedded pipelines need, so their nights stay offline; a
    night that needs more (a third-party project's backend or test dependencies) runs again with
    PyPI too. A NIGHTLY_WHEELHOUSE an operator names is the only source (offline); prod takes its
    package sources from the variables only."""
    if env != "local" or os.environ.get(INDEX_URL_VAR):
        return {}
    if os.environ.get(WHEELHOUSE_VAR):
        return {"wheelhouse": os.environ[WHEELHOUSE_VAR]}
    for folder in (REPO_WHEELHOUSE, home_wheelhouse(home)):
        if folder.is_dir():
            return {"wheelhouse": str(folder), "fallback_index_url": PYPI}
    return {}


def local_package_sources(home: Path) -> str:
    """Where local mode's builds take their packages from, in words, as `resources_for` wires them
    (the variables' values, not their names; no URL credentials)."""
    wheelhouse = local_wheelhouse("local", home)
    builder = PythonBuildResource(
        toolchain_dir=str(home / "toolchain"),
        index_url=os.environ.get(INDEX_URL_VAR) or None,
        wheelhouse=wheelhouse.get("wheelhouse"),
        fallback_index_url=wheelhouse.get("fallback_index_url"),
    )
    return builder.package_sources()


def registry_endpoints() -> dict[str, RegistryEndpoint]:
    """A role for each NIGHTLY_REGISTRY_<ROLE>_URL that is set; its password by the variable's name."""
    endpoints = {}
    for role in REGISTRY_ROLES:
        prefix = f"NIGHTLY_REGISTRY_{role.upper()}_"
        if not os.environ.get(prefix + "URL"):
            continue
        endpoints[role] = RegistryEndpoint(
            **env_settings(
                url=prefix + "URL",
                username=prefix + "USERNAME",
                ca_cert=prefix + "CA_CERT",
                namespace=prefix + "NAMESPACE",
                auth=prefix + "AUTH",
                aws_region=prefix + "AWS_REGION",
                aws_endpoint_url=prefix + "AWS_ENDPOINT_URL",
            ),
            password_env=prefix + "PASSWORD" if os.environ.get(prefix + "PASSWORD") else None,
        )
    return endpoints


def package_indexes(env: Env, home: Path) -> PackageIndexesResource:
    """The local find-links folder, and each index of INDEX_VARIABLES whose URL is set, with its
    credentials by the variables' names. In `local`, an unset NIGHTLY_TEST_INDEX_URL puts the
    `test` index in the local folder (a laptop night runs end to end); `production`, and `test`
    in prod, need their variables."""
    indexes = {}
    local_names = [LOCAL]
    for name, variables in INDEX_VARIABLES.items():
        if os.environ.get(variables.url):
            indexes[name] = PackageIndex(
                **env_settings(
                    url=variables.url,
                    simple_url=variables.simple_url,
                    username=variables.username,
                    password=variables.password,
                )
            )
        elif env == "local" and name == "test":
            local_names.append(name)
    return PackageIndexesResource(local_root=str(home / "index"), indexes=indexes, local_names=local_names)


def artefact_store(env: Env, home: Path) -> ArtefactStoreResource:
    """Local folders served by `nightly serve`; in prod (or with a bucket set) GCS via dagster-gcp."""
    root = str(home / "artefacts")
    site = os.environ.get(RESULTS_SITE_VAR, "1").strip().lower() not in ("0", "false", "no", "off")
    if env != "prod" and not os.environ.get(ARTEFACTS_BUCKET_VAR):
        return ArtefactStoreResource(
            root=root, results_site=site, **env_settings(base_url="NIGHTLY_ARTEFACTS_URL")
        )
    # Only here: dagster-gcp imports BigQuery, pandas and pyarrow, which a host without a bucket never needs.
    from dagster_gcp import GCSResource

    from nightly_assets.artefacts.gcs import GcsArtefactStoreResource

    return GcsArtefactStoreResource(
        root=root,
        results_site=site,
        gcs=GCSResource(**env_settings(project="NIGHTLY_GCP_PROJECT")),
        bucket=dg.EnvVar(ARTEFACTS_BUCKET_VAR),
        **env_settings(
            prefix="NIGHTLY_ARTEFACTS_PREFIX",
            base_url="NIGHTLY_ARTEFACTS_URL",
            browse_url="NIGHTLY_ARTEFACTS_BROWSE_URL",
            upload_deadline_s="NIGHTLY_ARTEFACTS_UPLOAD_DEADLINE_S",
        ),
    )
