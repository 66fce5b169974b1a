"""The code location: every catalog pipeline as assets, jobs and schedules, plus alerts and resources."""

from __future__ import annotations

from pathlib import Path

import dagster as dg

from nightly_assets.catalog.loader import catalog_dir, load_catalog
from nightly_assets.github.sensors import build_pr_label_sensor
from nightly_assets.pipelines import build_pipeline
from nightly_assets.reporting.sensors import build_alert_sensors
from nightly_assets.resources import resources_for
from nightly_assets.settings import nightly_env, nightly_home
from nightly_assets.tpu.pr_tier import build_pr_job, pr_op_name
from nightly_assets.tpu.sensors import build_tpu_sweeper_sensor

EMBEDDED_PIPELINE = "demo"
# Stages of a run execute in parallel, each in its own process, forked from a server that has
# already imported Dagster and this code location (spawning each from scratch costs seconds a step).
STAGE_EXECUTOR = dg.multiprocess_executor.configured(
    {"start_method": {"forkserver": {"preload_modules": ["nightly_assets.definitions"]}}}
)


def build_definitions(directory: Path | None = None) -> dg.Definitions:
    directory = directory or catalog_dir()
    catalog = load_catalog(directory)
    env = nightly_env()
    pipelines = [
        build_pipeline(catalog, directory, p, schedule_running=env == "prod" or p.name == EMBEDDED_PIPELINE)
        for p in catalog.pipelines.values()
    ]
    # Tier 3 of seed 003: pipelines with a PR label get a PR job and the sensor that starts it.
    labelled = [p for p in catalog.pipelines.values() if p.github and p.github.pr_label]
    pr_jobs = {p.name: build_pr_job(p, catalog.pool_of(p.pr_stage())) for p in labelled}
    return dg.Definitions(
        assets=[a for p in pipelines for a in p.assets],
        jobs=[j for p in pipelines for j in (p.nightly_job, p.summary_job)] + list(pr_jobs.values()),
        schedules=[p.schedule for p in pipelines],
        sensors=[
            *build_alert_sensors(catalog, [p.summary_job for p in pipelines]),
            *(build_pr_label_sensor(p, pr_jobs[p.name], pr_op_name(p.name), env == "prod") for p in labelled),
            build_tpu_sweeper_sensor(catalog, env == "prod"),
        ],
        resources=resources_for(env, nightly_home()),
        executor=STAGE_EXECUTOR,
    )


defs = build_definitions()
