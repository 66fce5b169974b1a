"""Seed 003's tier 3: a labelled pull request's head commit through the pipeline's TPU suite,
with a commit status while it runs and a PR comment when it ends.

The PR tier is a job of its own, not a partition of the nightly assets: a PR's results must not
become a night's materializations or move the nightly baselines. Its suite, cost and stage rows
go to the warehouse under the target `pr-<number>` of the day it ran.
"""

import datetime as dt
import os
import re

import dagster as dg

from nightly_assets.artefacts.resources import ArtefactStoreResource
from nightly_assets.catalog.models import Pipeline
from nightly_assets.github.client import GitHubError
from nightly_assets.github.resources import GitHubResource
from nightly_assets.results import NightKey, TestReport
from nightly_assets.sources.resources import GitSourcesResource
from nightly_assets.testing.suite_params import TestSuiteParams
from nightly_assets.tpu.resources import TpuVmResource
from nightly_assets.tpu.stage import TpuRunEnded, run_suite_on_vm
from nightly_assets.warehouse.resources import WarehouseResource
from nightly_assets.warehouse.rows import MachineCost

PR_TAG = "nightly/pr"
SHA_TAG = "nightly/head_sha"
_SHA = re.compile(r"^[0-9a-f]{40}$")


class PullRequestRun(dg.Config):
    """Which pull request and commit to test (the label sensor fills it in)."""

    pr: int
    sha: str
    labeled_by: str = ""


def pr_job_name(pipeline: str) -> str:
    return f"{pipeline}_pr"


def pr_op_name(pipeline: str) -> str:
    return f"{pipeline}_pr_tests"


def status_context(pipeline: Pipeline) -> str:
    assert pipeline.github is not None
    return pipeline.github.status_context or f"nightly/{pipeline.name}"


def build_pr_job(pipeline: Pipeline, pool: str | None) -> dg.JobDefinition:
    assert pipeline.github is not None and pipeline.github.pr_label is not None
    github_repo = pipeline.github.repo
    stage = pipeline.pr_stage()
    suite = stage.suite
    assert suite is not None
    params = stage.typed_params
    assert isinstance(params, TestSuiteParams)  # the catalog validated it as a test suite
    repo = next(r for r in pipeline.repositories if r.name == (params.repo or pipeline.repositories[0].name))
    target = pipeline.targets[0]
    context_name = status_context(pipeline)

    @dg.op(
        name=pr_op_name(pipeline.name),
        description=f"{stage.name} of a labelled pull request's head commit on a fresh TPU VM.",
        pool=pool,
        tags={"nightly/stage_kind": "test_suite"},
    )
    def pr_tests(
        context: dg.OpExecutionContext,
        config: PullRequestRun,
        git: GitSourcesResource,
        artefacts: ArtefactStoreResource,
        warehouse: WarehouseResource,
        tpu_vms: TpuVmResource,
        github: GitHubResource,
    ) -> dg.Output[None]:
        if not _SHA.match(config.sha):
            raise ValueError(f"pr run config: sha must be a 40-digit commit id, got {config.sha!r}")
        gh = github.client(github_repo)
        link = _run_url(context.run_id)
        gh.set_status(
            config.sha,
            "pending",
            context=context_name,
            description=f"{stage.name} on {target.name}",
            target_url=link,
        )
        key = NightKey(pipeline.name, dt.datetime.now(dt.UTC).date(), f"pr-{config.pr}")
        workdir = artefacts.stage_dir(key, stage.name, fresh=True)
        store = warehouse.store()
        costs: list[MachineCost] = []

        def record(cost: MachineCost) -> None:
            costs.append(cost)
            store.record_cost(key, cost)

        report: TestReport | None = None
        problem: str | None = None
        try:
            pin = git.pin(repo.name, repo.url, repo.branch, dt.datetime.now(dt.UTC), ref=config.sha)
            checkout = git.checkout(repo.name, pin.sha, workdir / repo.name)
            result = run_suite_on_vm(
                tpu_vms,
                name=stage.name,
                suite=suite,
                params=params,
                target=target,
                checkout=checkout,
                commit=pin.sha,
                run_id=context.run_id,
                night=key.night.isoformat(),
                workdir=workdir,
                labels={"pipeline": pipeline.name, "target": target.name, "pr": str(config.pr)},
                log=context.log,
                on_cost=record,
            )
            report = result.report
            store.record_test_report(key, report, run_id=context.run_id)
        except TpuRunEnded as exc:
            problem = str(exc)
        except BaseException as exc:
            cancelled = not isinstance(exc, Exception)
            problem = "the run was cancelled" if cancelled else f"{type(exc).__name__}: {exc}"
            raise
        finally:
            # The PR hears how it ended whatever happened, so its status never stays pending.
            state, summary, comment = _verdict(
                stage.name, target.name, config.sha, report, problem, costs[-1] if costs else None, link
            )
            try:
                gh.set_status(config.sha, state, context=context_name, description=summary, target_url=link)
                url = gh.comment(config.pr, comment)
                context.log.info(f"PR #{config.pr}: status {state}, comment {url}")
            except GitHubError as exc:
                context.log.error(f"PR #{config.pr}: could not report '{state}' to GitHub: {exc}")
                if problem is None:
                    raise
            finally:
                gh.close()
        if problem is not None:
            raise dg.Failure(description=problem)
        assert report is not None
        if not report.passed_all:
            raise dg.Failure(
                description=f"{len(report.failures)} of {report.total} tests failed on PR #{config.pr}"
            )
        return dg.Output(None, metadata={"report": report.counts(), "comment": url})

    @dg.job(
        name=pr_job_name(pipeline.name),
        description=f"Tier 3 of {pipeline.title}: a pull request labelled '{pipeline.github.pr_label}'.",
        tags={"nightly/pipeline_pr": pipeline.name},
    )
    def pr_job() -> None:
        pr_tests()

    return pr_job


def _verdict(
    stage: str,
    target: str,
    sha: str,
    report: TestReport | None,
    problem: str | None,
    cost: MachineCost | None,
    link: str | None,
) -> tuple[str, str, str]:
    """(commit status state, its one-line description, the PR comment) for how the run ended."""
    vm = f"VM {cost.lifetime_s:.0f} s, ${cost.cost_usd:.4f}" if cost else "no VM"
    where = f"`{stage}` on {target} at {sha[:12]} ({vm})"
    details: list[str] = []
    if report is not None and report.passed_all:
        state, icon, summary = "success", "✅", f"TPU tests passed: {report.count('passed')}/{report.total}"
    elif report is not None:
        state, icon = "failure", "❌"
        summary = f"TPU tests failed: {len(report.failures)} of {report.total}"
        details = [f"- `{case.node_id}`: {_first_line(case.message)}" for case in report.failures[:20]]
    else:
        state, icon, summary = "error", "⚠️", "TPU tests could not finish"
        details = [f"```\n{(problem or 'unknown')[:1500]}\n```"]
    lines = [f"{icon} {summary}, {where}", *(["", *details] if details else [])]
    if link:
        lines += ["", f"[Run in Dagster]({link})"]
    return state, f"{summary} ({vm})", "\n".join(lines)


def _first_line(text: str | None) -> str:
    return text.strip().splitlines()[0][:200] if text and text.strip() else ""


def _run_url(run_id: str) -> str | None:
    """The run's page, when NIGHTLY_DAGSTER_URL says where the UI is."""
    base = os.environ.get("NIGHTLY_DAGSTER_URL", "").rstrip("/")
    return f"{base}/runs/{run_id}" if base else None
