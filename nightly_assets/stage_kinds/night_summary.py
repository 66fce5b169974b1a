"""The night summary stage: the table of every stage, written as a file and as Markdown metadata.
It also applies the pipeline's `retention_days` to the artefacts: the stage folders (logs, JUnit,
build metrics) of nights older than that are deleted, their warehouse rows kept."""

import datetime as dt

import dagster as dg

from nightly_assets.artefacts.resources import ArtefactError, ArtefactStoreResource
from nightly_assets.catalog.models import GitHub as GitHubSettings
from nightly_assets.catalog.models import Pipeline
from nightly_assets.github.client import GitHubError
from nightly_assets.github.resources import GitHubResource
from nightly_assets.reporting.summary import night_summary
from nightly_assets.results import NightKey
from nightly_assets.stage_kinds.spec import ORCHESTRATOR, NoParams, StageKind
from nightly_assets.stages import StageSpec, recorded_stage
from nightly_assets.warehouse.resources import WarehouseResource
from nightly_assets.warehouse.store import Warehouse


def build_night_summary_asset(spec: StageSpec) -> dg.AssetsDefinition:
    judged = set(spec.upstream())  # the night's status; release comes after the summary
    github_settings = spec.pipeline.github
    report_issue = github_settings is not None and github_settings.issue_on_failure

    @dg.asset(**spec.asset_args(freshness_policy=summary_freshness_policy(spec.pipeline)))
    def _night_summary(
        context: dg.AssetExecutionContext,
        artefacts: ArtefactStoreResource,
        warehouse: WarehouseResource,
        github: GitHubResource,
    ) -> dg.MaterializeResult:
        """The night's results table: stage, status, runner, duration, artefacts and machine cost."""
        issue: dict[str, str] = {}
        with recorded_stage(context, spec, artefacts, warehouse) as run:
            store = warehouse.store()
            summary = night_summary(
                spec.pipeline, run.key, store, artefacts, skip=spec.stage.name, judged=judged
            )
            markdown = summary.markdown()
            path = run.workdir / "summary.md"
            path.write_text(markdown)
            night = store.night(run.key)
            pins = night.pins if night else {}
            store.record_night(run.key, run_id=context.run.run_id, status=summary.status, pins=pins)
            cost_usd = round(float(sum(c.cost_usd for c in summary.costs)), 6)
            run.manifest.update(
                status=summary.status, summary=str(path), failed_tests=summary.failed_tests, cost_usd=cost_usd
            )
            run.artefact = str(path)
            run.detail = summary.status
            if report_issue and summary.status == "failure":
                assert github_settings is not None
                issue = _report_failure(context, github, github_settings, run.key, markdown)
                run.manifest["issue"] = issue
            pruned = _prune_artefacts(context, artefacts, store, run.key, spec.pipeline.retention_days)
            run.manifest["pruned"] = pruned
        return dg.MaterializeResult(
            metadata={
                "summary": dg.MetadataValue.md(markdown),
                "status": summary.status,
                "failed_tests": summary.failed_tests,
                "failed_checks": len(summary.checks),
                "cost_usd": dg.MetadataValue.float(cost_usd),
                **run.link_metadata(),
                **{f"issue/{k}": v for k, v in issue.items()},
                "pruned_artefacts": dg.MetadataValue.json(pruned),
            }
        )

    return _night_summary


def summary_freshness_policy(pipeline: Pipeline) -> dg.FreshnessPolicy:
    """A night's summary materializes between the schedule's tick and `summary_deadline_hours`
    later. Dagster's freshness daemon judges the asset as a whole (its latest materialization of
    any night or target) and alerts only in Dagster+: the `missing_night_alerts` sensor judges each
    night x target by the same deadline and alerts."""
    return dg.FreshnessPolicy.cron(
        deadline_cron=pipeline.summary_deadline_cron(),
        lower_bound_delta=dt.timedelta(hours=pipeline.thresholds.summary_deadline_hours),
        timezone="UTC",
    )


KIND = StageKind(
    "night_summary", NoParams, build_night_summary_asset, frozenset({"markdown"}), frozenset({ORCHESTRATOR})
)


def _prune_artefacts(
    context: dg.AssetExecutionContext,
    artefacts: ArtefactStoreResource,
    store: Warehouse,
    key: NightKey,
    retention_days: int,
) -> list[str]:
    """Delete the artefacts of the pipeline's nights older than `retention_days` before this
    night (the cutoff the registry's run tags expire by), but of nights still running (a
    backfill). The warehouse keeps their rows. Returns "night/target" of each pruned folder.
    An error is logged: the summary stands, and the next night prunes again."""
    cutoff = key.night - dt.timedelta(days=retention_days)
    running = {(n.night, n.target) for n in store.nights(key.pipeline, status="running")}
    try:
        removed = artefacts.prune(key.pipeline, cutoff, keep=running)
    except (ArtefactError, OSError) as exc:
        context.log.error(f"retention: could not prune the artefacts of nights before {cutoff}: {exc}")
        return []
    pruned = [f"{path.parent.name}/{path.name}" for path in removed]
    if pruned:
        context.log.info(f"retention ({retention_days} days): pruned the artefacts of {', '.join(pruned)}")
    return pruned


def _report_failure(
    context: dg.AssetExecutionContext,
    github: GitHubResource,
    settings: GitHubSettings,
    key: NightKey,
    markdown: str,
) -> dict[str, str]:
    """Seed 003's "Report failure": open the pipeline's failure issue, or comment on the open one.

    The marker names pipeline and target, so a second failing night updates the same issue. A
    GitHub that cannot be reached is logged and kept in metadata: the summary itself stands.
    """
    marker = f"nightly-assets:failure:{key.pipeline}:{key.target}"
    title = f"Nightly {key.pipeline} tests failed ({key.target})"
    night = key.night.isoformat()
    body = (
        f"The {key.pipeline} night {night} failed on {key.target} (run {context.run.run_id}).\n\n{markdown}"
    )
    try:
        with github.client(settings.repo) as client:
            issue, created = client.open_or_update_issue(
                title=title, body=body, marker=marker, labels=settings.issue_labels
            )
    except GitHubError as exc:
        context.log.error(f"could not open or update the failure issue on {settings.repo}: {exc}")
        return {"error": str(exc)}
    context.log.info(f"{'opened' if created else 'updated'} {issue.html_url}")
    return {"url": issue.html_url, "action": "opened" if created else "updated"}
