"""The night summary stage: the table of every stage, written as a file and as Markdown metadata.
It also applies the pipeline's `retention_days` to the artefacts: the stage folders (logs, JUnit,
build metrics) written longer ago than that are deleted, their warehouse rows kept."""

import datetime as dt
import functools
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import dagster as dg

from nightly_assets.artefacts.resources import ArtefactError, ArtefactStoreResource
from nightly_assets.catalog.models import GitHub as GitHubSettings
from nightly_assets.catalog.models import Pipeline
from nightly_assets.github.client import GitHubError
from nightly_assets.github.resources import GitHubResource
from nightly_assets.night_lease import SUMMARY_OF_TAG
from nightly_assets.partitions import night_key
from nightly_assets.reporting.alerts import alert_check, night_alert_spec
from nightly_assets.reporting.mail import MailResource
from nightly_assets.reporting.summary import night_summary, stages_after
from nightly_assets.results import NightKey
from nightly_assets.stage_kinds.spec import ORCHESTRATOR, NoParams, StageKind
from nightly_assets.stages import StageSpec, recorded_stage
from nightly_assets.warehouse.resources import WarehouseResource
from nightly_assets.warehouse.rows import NightRow

if TYPE_CHECKING:
    from nightly_assets.warehouse.store import Warehouse

SUCCEEDED = ("success", "warn")  # a night that ran whole; a later one ends a failure's keep


def build_night_summary_asset(spec: StageSpec) -> dg.AssetsDefinition:
    judged = set(spec.upstream())  # the night's status; release comes after the summary
    after = stages_after(spec.pipeline, spec.stage.name)
    github_settings = spec.pipeline.github
    report_issue = github_settings is not None and github_settings.issue_on_failure

    @dg.asset(
        **spec.asset_args(
            freshness_policy=summary_freshness_policy(spec.pipeline), check_specs=[night_alert_spec(spec.key)]
        )
    )
    def _night_summary(
        context: dg.AssetExecutionContext,
        artefacts: ArtefactStoreResource,
        warehouse: WarehouseResource,
        github: GitHubResource,
        mail: MailResource,
    ) -> dg.MaterializeResult:
        """The night's results table: stage, status, runner, duration, artefacts and machine cost."""
        issue: dict[str, str] = {}
        earlier = _earlier_summary(context, spec, artefacts, warehouse)
        with recorded_stage(context, spec, artefacts, warehouse) as run:
            store = warehouse.store()
            summary = night_summary(
                spec.pipeline,
                run.key,
                store,
                artefacts,
                skip=spec.stage.name,
                judged=judged,
                pending=_pending(context, spec.pipeline.name, after),
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
            if earlier is not None and earlier.get("issue"):
                issue = run.manifest["issue"] = earlier["issue"]  # reported when first written
            elif report_issue and summary.status == "failure":
                assert github_settings is not None
                issue = _report_failure(context, github, github_settings, run.key, markdown)
                run.manifest["issue"] = issue
            pruned = _prune_artefacts(context, artefacts, store, run.key, spec.pipeline.retention_days)
            run.manifest["pruned"] = pruned
            if artefacts.results_site:
                from nightly_assets.site.publish import update_site_after_night  # run time only

                site = update_site_after_night(spec.pipeline, store, artefacts, run.key, context.log)
                if site is not None:
                    run.manifest["site"] = site
            if spec.pipeline.mail:
                run.manifest["mail"] = _mail_report(
                    context, mail, spec.pipeline, run.key, summary.status, markdown, earlier, run.workdir
                )
        # The alerts sent about the run this summary is written for (a failed run's went out
        # before its summary run), shown as what they are; later ones are added as they are sent.
        summarized = context.run.tags.get(SUMMARY_OF_TAG) or context.run.run_id
        alerted = alert_check(warehouse.store().alerts(run.key, run_id=summarized), summarized)
        return dg.MaterializeResult(
            check_results=[alerted],
            metadata={
                "summary": dg.MetadataValue.md(markdown),
                "status": summary.status,
                "failed_tests": summary.failed_tests,
                "failed_checks": len(summary.checks),
                "cost_usd": dg.MetadataValue.float(cost_usd),
                **run.link_metadata(),
                **{f"issue/{k}": v for k, v in issue.items()},
                "pruned_artefacts": dg.MetadataValue.json(pruned),
                **(
                    {"results_site": dg.MetadataValue.url(run.manifest["site"])}
                    if "site" in run.manifest
                    else {}
                ),
                **({"mail": dg.MetadataValue.json(run.manifest["mail"])} if "mail" in run.manifest else {}),
            },
        )

    return _night_summary


def _pending(context: dg.AssetExecutionContext, pipeline: str, after: list[str]) -> list[str]:
    """The stages after the summary that this run is to materialize (all of them in a whole-job
    run): they end after it, and the run's follow-up writes the summary again with them."""
    selection = context.run.asset_selection  # empty or None: the whole job
    return [s for s in after if not selection or dg.AssetKey([pipeline, s]) in selection]


def _mail_report(
    context: dg.AssetExecutionContext,
    mail: MailResource,
    pipeline: Pipeline,
    key: NightKey,
    status: str,
    markdown: str,
    earlier: dict[str, Any] | None,
    summary_folder: Path,
) -> dict[str, Any]:
    """The report mailed once per summarized run (a follow-up that rewrites the summary sends it
    only if the first could not); what happened goes into the manifest, never a failure."""
    if earlier is not None and (earlier.get("mail") or {}).get("sent"):
        return dict(earlier["mail"])
    night_folder = summary_folder.parent  # <pipeline>/<night>/<target>/
    pdfs = sorted(night_folder.glob("*/*.pdf"))  # the night's reports (tf_theta's analysis)
    subject = f"{pipeline.title}: night {key.night} on {key.target}: {status}"
    outcome = mail.send_report(pipeline.mail, subject, markdown, pdfs)
    if outcome.sent:
        context.log.info(f"report mailed to {', '.join(outcome.recipients)} ({outcome.detail})")
    else:
        context.log.warning(f"report not mailed to {', '.join(outcome.recipients)}: {outcome.detail}")
    return outcome.record()


def _earlier_summary(
    context: dg.AssetExecutionContext,
    spec: StageSpec,
    artefacts: ArtefactStoreResource,
    warehouse: WarehouseResource,
) -> dict[str, Any] | None:
    """The manifest of the summary that the run this one follows up wrote (None for any other
    run): rewriting it with the stages after it, this run reports no failure issue again."""
    of = context.run.tags.get(SUMMARY_OF_TAG)
    key = night_key(spec.pipeline.name, context.partition_key)
    if of is None or not artefacts.has_manifest(key, spec.stage.name):
        return None
    rows = {r.stage: r for r in warehouse.store().stages(key)}
    row = rows.get(spec.stage.name)
    if row is None or row.run_id != of:
        return None
    return artefacts.read_manifest(key, spec.stage.name)


def summary_freshness_policy(pipeline: Pipeline) -> dg.FreshnessPolicy:
    """A night's summary materializes between the schedule's tick and `summary_deadline_hours`
    later. Dagster's freshness daemon judges the asset as a whole (its latest materialization of
    any night or target) and alerts only in Dagster+: the `missing_night_alerts` sensor judges each
    night x target by the same deadline and alerts."""
    return _cron_freshness_policy(pipeline.summary_deadline_cron(), pipeline.summary_deadline_hours)


@functools.cache
def _cron_freshness_policy(deadline_cron: str, hours: int) -> dg.FreshnessPolicy:
    """One policy per deadline: Dagster checks each new one against 1,000 ticks of its cron."""
    return dg.FreshnessPolicy.cron(
        deadline_cron=deadline_cron, lower_bound_delta=dt.timedelta(hours=hours), timezone="UTC"
    )


KIND = StageKind(
    "night_summary", NoParams, build_night_summary_asset, frozenset({"markdown"}), frozenset({ORCHESTRATOR})
)


def _prune_artefacts(
    context: dg.AssetExecutionContext,
    artefacts: ArtefactStoreResource,
    store: "Warehouse",
    key: NightKey,
    retention_days: int,
) -> list[str]:
    """Delete the artefacts of the pipeline's nights last written more than `retention_days` ago,
    but this night's, nights still running (a backfill) and each target's latest failed night
    that no later night of the target has succeeded since (the evidence someone is still to
    look at). The warehouse keeps their rows. Returns "night/target" of each pruned folder.
    An error is logged: the summary stands, and the next night prunes again."""
    cutoff = dt.datetime.now(dt.UTC) - dt.timedelta(days=retention_days)
    keep = {(key.night, key.target)} | kept_nights(store.nights(key.pipeline))
    try:
        removed = artefacts.prune(key.pipeline, cutoff, keep=keep)
    except (ArtefactError, OSError) as exc:
        context.log.error(f"retention: could not prune artefacts written before {cutoff:%F %H:%M}Z: {exc}")
        return []
    pruned = [f"{path.parent.name}/{path.name}" for path in removed]
    if pruned:
        context.log.info(f"retention ({retention_days} days): pruned the artefacts of {', '.join(pruned)}")
    return pruned


def kept_nights(nights: Sequence[NightRow]) -> set[tuple[dt.date, str]]:
    """The (night, target) pairs retention keeps whatever their age: nights still running, and
    per target its latest failed night unless a later night of the target succeeded."""
    kept = {(n.night, n.target) for n in nights if n.status == "running"}
    latest: dict[str, NightRow] = {}
    for n in sorted(nights, key=lambda n: n.night):
        if n.status == "failure":
            latest[n.target] = n
        elif n.status in SUCCEEDED and n.target in latest:
            del latest[n.target]
    return kept | {(n.night, n.target) for n in latest.values()}


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
