"""The code location: every catalog pipeline as assets, jobs and schedules, plus alerts and resources."""

from __future__ import annotations

from pathlib import Path

import dagster as dg

from nightly_assets.catalog.loader import catalog_dir, load_catalog
from nightly_assets.pipelines import build_pipeline
from nightly_assets.reporting.sensors import build_alert_sensors
from nightly_assets.resources import resources_for
from nightly_assets.settings import nightly_env, nightly_home

EMBEDDED_PIPELINE = "demo"


def build_definitions(directory: Path | None = None) -> dg.Definitions:
    directory = directory or catalog_dir()
    catalog = load_catalog(directory)
    env = nightly_env()
    pipelines = [
        build_pipeline(catalog, directory, p, schedule_running=env == "prod" or p.name == EMBEDDED_PIPELINE)
        for p in catalog.pipelines.values()
    ]
    return dg.Definitions(
        assets=[a for p in pipelines for a in p.assets],
        jobs=[j for p in pipelines for j in (p.nightly_job, p.summary_job)],
        schedules=[p.schedule for p in pipelines],
        sensors=build_alert_sensors(catalog, [p.summary_job for p in pipelines]),
        resources=resources_for(env, nightly_home()),
    )


defs = build_definitions()
