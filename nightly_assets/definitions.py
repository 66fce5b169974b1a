"""The code location: every catalog pipeline as assets, jobs and schedules, plus alerts and resources.

The catalog is the defs folder (nightly_assets/defs/, or NIGHTLY_CATALOG_DIR): one NightlyPipeline
component per `<name>/defs.yaml`. The catalog loader reads them all with runners.yaml, so the
cross-pipeline checks and sensors see every pipeline, and each pipeline is built as its component
builds it (nightly_assets.pipelines.build_pipeline).
"""

from __future__ import annotations

from pathlib import Path

import dagster as dg

from nightly_assets.catalog.loader import catalog_dir, load_catalog
from nightly_assets.pipelines import build_pipeline
from nightly_assets.reporting.sensors import build_alert_sensors, build_missing_night_sensor
from nightly_assets.resources import resources_for
from nightly_assets.settings import nightly_env, nightly_home
from nightly_assets.tpu.sensors import build_tpu_sweeper_sensor

# Stages of a run execute in parallel, each in its own process, forked from a server that has
# already imported Dagster and this code location (spawning each from scratch costs seconds a step).
STAGE_EXECUTOR = dg.multiprocess_executor.configured(
    {"start_method": {"forkserver": {"preload_modules": ["nightly_assets.definitions"]}}}
)


def build_definitions(directory: Path | None = None) -> dg.Definitions:
    directory = directory or catalog_dir()
    catalog = load_catalog(directory)
    env = nightly_env()
    by_name = {name: build_pipeline(catalog, directory, p, env) for name, p in catalog.pipelines.items()}
    pipelines = list(by_name.values())
    return dg.Definitions(
        assets=[a for p in pipelines for a in p.assets],
        jobs=[j for p in pipelines for j in p.jobs] + [p.pr_job for p in pipelines if p.pr_job],
        schedules=[p.schedule for p in pipelines],
        sensors=[
            *build_alert_sensors(catalog, [p.summary_job for p in pipelines]),
            build_missing_night_sensor(catalog, {name: p.schedule for name, p in by_name.items()}),
            *(s for p in pipelines for s in p.sensors),
            build_tpu_sweeper_sensor(catalog, env == "prod"),
        ],
        resources=resources_for(env, nightly_home()),
        executor=STAGE_EXECUTOR,
    )


defs = build_definitions()
