"""The two resource sets: `local` does the real work on this machine, `prod` talks to the services."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import dagster as dg
from dagster_gcp import GCSResource
from dagster_slack import SlackResource

from nightly_assets.artefacts.resources import (
    DEFAULT_BASE_URL,
    ArtefactStoreResource,
    GcsArtefactStoreResource,
)
from nightly_assets.batch.resources import batch_scheduler_from_env
from nightly_assets.builds.resources import PythonBuildResource
from nightly_assets.containers.config import registries_from_env, runner_pool_from_env
from nightly_assets.github.resources import github_from_env
from nightly_assets.rbe.resources import bazel_rbe_from_env
from nightly_assets.release.resources import LocalPackageIndexResource
from nightly_assets.reporting.resources import FileNotifierResource, SlackNotifierResource
from nightly_assets.settings import Env
from nightly_assets.sources.resources import GitSourcesResource
from nightly_assets.testing.resources import LocalTestRunnerResource
from nightly_assets.tpu.resources import tpu_vms_from_env
from nightly_assets.warehouse.resources import WarehouseResource
from nightly_assets.warehouse.store import RETRY_S

WAREHOUSE_URL_VAR = "NIGHTLY_WAREHOUSE_URL"
ARTEFACTS_BUCKET_VAR = "NIGHTLY_ARTEFACTS_BUCKET"


def resources_for(env: Env, home: Path) -> dict[str, Any]:
    # The URL may carry a password: hand Dagster the variable's name, never its value.
    warehouse_url: Any = (
        dg.EnvVar(WAREHOUSE_URL_VAR)
        if os.environ.get(WAREHOUSE_URL_VAR) or env == "prod"
        else f"sqlite:///{home / 'warehouse.sqlite'}"
    )
    resources: dict[str, Any] = {
        "git": GitSourcesResource(cache_dir=str(home / "git")),
        "artefacts": artefact_store(env, home),
        "warehouse": WarehouseResource(
            url=warehouse_url, retry_s=float(os.environ.get("NIGHTLY_WAREHOUSE_RETRY_S") or RETRY_S)
        ),
        "builder": PythonBuildResource(toolchain_dir=str(home / "toolchain")),
        "test_runner": LocalTestRunnerResource(),
        "package_index": LocalPackageIndexResource(root=str(home / "index")),
        "notifier": FileNotifierResource(path=str(home / "alerts.jsonl")),
        "docker_pool": runner_pool_from_env(),
        "registries": registries_from_env(),
        "batch": batch_scheduler_from_env(home),
        "bazel_rbe": bazel_rbe_from_env(home),
        "tpu_vms": tpu_vms_from_env(),
        "github": github_from_env(),
    }
    if env == "prod":
        resources["notifier"] = SlackNotifierResource(
            slack=SlackResource(token=dg.EnvVar("SLACK_BOT_TOKEN")),
            api_url=os.environ.get("NIGHTLY_SLACK_API_URL") or None,
        )
    return resources


def artefact_store(env: Env, home: Path) -> ArtefactStoreResource:
    """Local folders served by `nightly serve`; in prod (or with a bucket set) GCS via dagster-gcp."""
    root = str(home / "artefacts")
    if env != "prod" and not os.environ.get(ARTEFACTS_BUCKET_VAR):
        return ArtefactStoreResource(
            root=root, base_url=os.environ.get("NIGHTLY_ARTEFACTS_URL") or DEFAULT_BASE_URL
        )
    optional: dict[str, Any] = {  # pydantic converts the numbers
        name: os.environ[var]
        for name, var in (
            ("prefix", "NIGHTLY_ARTEFACTS_PREFIX"),
            ("base_url", "NIGHTLY_ARTEFACTS_URL"),
            ("browse_url", "NIGHTLY_ARTEFACTS_BROWSE_URL"),
            ("upload_deadline_s", "NIGHTLY_ARTEFACTS_UPLOAD_DEADLINE_S"),
        )
        if os.environ.get(var)
    }
    return GcsArtefactStoreResource(
        root=root,
        gcs=GCSResource(project=os.environ.get("NIGHTLY_GCP_PROJECT") or None),
        bucket=dg.EnvVar(ARTEFACTS_BUCKET_VAR),
        **optional,
    )
