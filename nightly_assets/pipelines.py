"""Catalog -> Dagster: each pipeline's stage assets, its nightly and summary jobs, its schedule, and
its PR tier (a PR job and the label sensor that starts it) when it has a PR label."""

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import dagster as dg

from nightly_assets.catalog.models import Catalog, Pipeline
from nightly_assets.culprits.sensors import build_culprit_sensor, culprit_job_name
from nightly_assets.github.sensors import build_pr_label_sensor
from nightly_assets.partitions import partition_key, pipeline_partitions, runs_of_tick
from nightly_assets.reporting.alerts import PIPELINE_TAG
from nightly_assets.reporting.follow_up import summary_run_stages
from nightly_assets.reporting.sensors import summary_job_name
from nightly_assets.stage_kinds import stage_kind
from nightly_assets.stages import StageSpec
from nightly_assets.tpu.pr_tier import build_pr_job, pr_op_name

if TYPE_CHECKING:  # what dg.define_asset_job returns; the class is not exported
    from dagster._core.definitions.unresolved_asset_job_definition import UnresolvedAssetJobDefinition

EMBEDDED_PIPELINE = "demo"  # its schedule runs in every environment


@dataclass(frozen=True)
class PipelineDefs:
    assets: list[dg.AssetsDefinition]
    nightly_job: "UnresolvedAssetJobDefinition"
    summary_job: "UnresolvedAssetJobDefinition"
    schedule: dg.ScheduleDefinition
    pr_job: dg.JobDefinition | None = None  # tier 3 of seed 003: a pipeline with a PR label
    pr_sensor: dg.SensorDefinition | None = None
    culprit_job: "UnresolvedAssetJobDefinition | None" = None  # a pipeline with a culprit_search stage
    culprit_sensor: dg.SensorDefinition | None = None

    @property
    def jobs(self) -> "list[UnresolvedAssetJobDefinition]":
        return [self.nightly_job, self.summary_job, *([self.culprit_job] if self.culprit_job else [])]

    @property
    def sensors(self) -> list[dg.SensorDefinition]:
        return [s for s in (self.pr_sensor, self.culprit_sensor) if s is not None]

    def definitions(self) -> dg.Definitions:
        """The pipeline on its own, as its NightlyPipeline component builds it."""
        return dg.Definitions(
            assets=self.assets,
            jobs=[*self.jobs, *([self.pr_job] if self.pr_job else [])],
            schedules=[self.schedule],
            sensors=self.sensors,
        )


def nightly_job_name(pipeline: str) -> str:
    return f"{pipeline}_nightly"


def build_pipeline(catalog: Catalog, catalog_dir: Path, pipeline: Pipeline, env: str) -> PipelineDefs:
    """`env`: prod runs every schedule and sensor; elsewhere only the embedded pipeline's schedule."""
    schedule_running = env == "prod" or pipeline.name == EMBEDDED_PIPELINE
    partitions_def = pipeline_partitions(pipeline)
    assets = [
        stage_kind(stage.kind).build(StageSpec(catalog, catalog_dir, pipeline, stage, partitions_def))
        for stage in pipeline.stages
    ]
    tags = {PIPELINE_TAG: pipeline.name}
    culprit_keys = [dg.AssetKey([pipeline.name, s.name]) for s in pipeline.stages_of("culprit_search")]
    nightly_job = dg.define_asset_job(
        nightly_job_name(pipeline.name),
        # a culprit search runs on its own, after the night: its job and sensor below
        selection=dg.AssetSelection.groups(pipeline.name) - dg.AssetSelection.assets(*culprit_keys),
        tags=tags,
        description=f"One night of {pipeline.title} for one target.",
    )
    summary_job = dg.define_asset_job(
        summary_job_name(pipeline.name),
        selection=dg.AssetSelection.assets(
            *(dg.AssetKey([pipeline.name, stage]) for stage in summary_run_stages(catalog, pipeline.name))
        ),
        tags=tags,
        description="Writes a night's summary table (and its test health) after a night run that did not.",
    )
    schedule = _night_schedule(pipeline, nightly_job, schedule_running)
    culprit_job = culprit_sensor = None
    if culprit_keys:
        culprit_job = dg.define_asset_job(
            culprit_job_name(pipeline.name),
            selection=dg.AssetSelection.assets(*culprit_keys),
            tags=tags,
            description="Bisects the commits of a night's new failures and regressions.",
        )
        culprit_sensor = build_culprit_sensor(pipeline, culprit_job)
    pr_job = pr_sensor = None
    if pipeline.github is not None and pipeline.github.pr_label is not None:
        pr_job = build_pr_job(pipeline, catalog.pool_of(pipeline.pr_stage()))
        pr_sensor = build_pr_label_sensor(pipeline, pr_job, pr_op_name(pipeline.name), env == "prod")
    return PipelineDefs(
        assets, nightly_job, summary_job, schedule, pr_job, pr_sensor, culprit_job, culprit_sensor
    )


def _night_schedule(
    pipeline: Pipeline, job: "UnresolvedAssetJobDefinition", running: bool
) -> dg.ScheduleDefinition:
    @dg.schedule(
        name=f"{pipeline.name}_schedule",
        cron_schedule=pipeline.cron,
        job=job,
        execution_timezone="UTC",
        default_status=dg.DefaultScheduleStatus.RUNNING if running else dg.DefaultScheduleStatus.STOPPED,
        description=(
            f"Runs the slot that just began, one run per target ({pipeline.cron} UTC)."
            if pipeline.slotted
            else f"Runs the night that just ended, one run per target ({pipeline.cron} UTC)."
        ),
    )
    def _schedule(context: dg.ScheduleEvaluationContext) -> list[dg.RunRequest]:
        night, cells = runs_of_tick(pipeline, context.scheduled_execution_time)
        return [
            dg.RunRequest(run_key=f"{night.isoformat()}|{cell}", partition_key=partition_key(night, cell))
            for cell in cells
        ]

    return _schedule
