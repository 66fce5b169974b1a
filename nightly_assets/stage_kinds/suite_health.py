"""The test_health stage: every test of the night's suites judged over the last nights from the
warehouse (flaky, broken, stable; testing/flakiness.py), the flaky and in-scope shares gated, and
the tests that started failing tonight named with their suspect commits."""

from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import dagster as dg
from pydantic import Field

from nightly_assets.artefacts.resources import ArtefactStoreResource
from nightly_assets.night_lease import SUMMARY_OF_TAG
from nightly_assets.sources.resources import GitSourcesResource
from nightly_assets.sources.suspects import SpanKey
from nightly_assets.stage_kinds.spec import ORCHESTRATOR, StageKind, StageParams
from nightly_assets.stages import StageSpec, recorded_stage, stage_events
from nightly_assets.testing import health, health_checks
from nightly_assets.testing.health import SHOWN, Judged
from nightly_assets.warehouse.resources import WarehouseResource
from nightly_assets.warehouse.rows import TestVerdict
from nightly_assets.words import plural


class SuiteHealthParams(StageParams):
    __test__ = False

    nights: int = Field(default=30, ge=3)  # the window a test is judged over
    suites: list[str] = Field(default_factory=list)  # test_suite stages judged; default every upstream one
    in_scope_suite: str | None = None  # the suite whose run share is the in-scope share (torch_spyre)

    def stage_refs(self) -> list[str]:
        return [*self.suites, *([self.in_scope_suite] if self.in_scope_suite else [])]


def build_test_health_asset(spec: StageSpec) -> dg.AssetsDefinition:
    params = spec.params(SuiteHealthParams)
    thresholds = spec.pipeline.thresholds
    suites = params.suites or [u.name for u in spec.upstream_stages if u.kind == "test_suite"]
    urls = {repo.name: repo.url for repo in spec.pipeline.repositories}
    specs = health_checks.health_check_specs(
        spec.key, thresholds.flaky_share_max, thresholds.in_scope_share_min if params.in_scope_suite else None
    )

    @dg.asset(**spec.asset_args(check_specs=specs))
    def _test_health(
        context: dg.AssetExecutionContext,
        artefacts: ArtefactStoreResource,
        warehouse: WarehouseResource,
        git: GitSourcesResource,
    ) -> Iterator[dg.MaterializeResult | dg.AssetCheckResult]:
        """Flaky and broken tests over the last nights, and the night's flaky and in-scope shares."""
        with recorded_stage(context, spec, artefacts, warehouse) as run:
            store = warehouse.store()
            histories = store.test_histories(
                run.key.pipeline, run.key.target, until=run.key.night, nights=params.nights, suites=suites
            )
            earlier = [n for n in histories.nights if n < run.key.night]
            broken_before = {
                (v.suite, v.test_id)
                for v in (
                    store.verdicts(replace(run.key, night=earlier[-1]), state="broken") if earlier else []
                )
            }
            judged = health.judge(
                histories,
                run.key.night,
                clean_nights=thresholds.quarantine_clean_nights,
                broken_before=broken_before,
            )
            counts = store.suite_counts(run.key)
            ran = health.ran(counts, suites)
            flaky = [j for j in judged if j.verdict.state == "flaky"]
            spans: dict[SpanKey, dict[str, Any]] = {}
            for j in judged:
                if j.new_failure:
                    for repo, (good, bad) in j.verdict.suspects.items():
                        if (repo, good, bad) not in spans:
                            spans[(repo, good, bad)] = git.suspects(repo, urls.get(repo), good, bad)
            store.record_verdicts(run.key, [_verdict(j, spans) for j in judged])
            run.checks.append(health_checks.flaky_share(spec.key, flaky, ran, thresholds.flaky_share_max))
            run.checks.append(health_checks.no_new_broken(spec.key, judged, spans))
            events = health.infra_events(histories, run.key.night)
            run.checks.append(health_checks.no_infra_event(spec.key, events))
            run.checks.append(health_checks.no_flakier(spec.key, judged))
            in_scope = ""
            if params.in_scope_suite and thresholds.in_scope_share_min is not None:
                check = health_checks.in_scope_share(
                    spec.key,
                    params.in_scope_suite,
                    counts.get(params.in_scope_suite),
                    thresholds.in_scope_share_min,
                )
                run.checks.append(check)
                if "share" in check.metadata:
                    in_scope = f"; in-scope share {check.metadata['share'].value:.1%}"
            if SUMMARY_OF_TAG in context.run.tags:
                # A summary run after the night's run gates nothing (release is not in it), and a
                # failed blocking check would stop the summary: the gates are recorded as WARN.
                run.checks[:] = [_as_warning(c) for c in run.checks]
            states = {
                s: sum(j.verdict.state == s for j in judged) for s in ("flaky", "broken", "insufficient")
            }
            run.manifest.update(
                nights=[n.isoformat() for n in histories.nights],
                ran=ran,
                flaky_share=round(health.share(len(flaky), ran), 4),
                quarantined=sum(j.quarantined for j in judged),
                **states,
                new_failures=[health_checks.new_failure_line(j, spans) for j in judged if j.new_failure],
                infra_events=[e.line(shown=SHOWN) for e in events],
                flakier=[health_checks.flakier_line(j) for j in judged if j.new_flakier],
            )
            run.detail = (
                f"{states['flaky']} flaky ({health.share(len(flaky), ran):.1%} of {ran}), "
                f"{states['broken']} broken over {_nights(len(histories.nights))}{in_scope}"
                + (f"; {plural(len(events), 'infra event')}" if events else "")
            )
        yield from stage_events(
            run,
            {
                "flaky_share": dg.MetadataValue.float(run.manifest["flaky_share"]),
                "tests": dg.MetadataValue.md(_table(judged)),
            },
        )

    return _test_health


def _as_warning(check: dg.AssetCheckResult) -> dg.AssetCheckResult:
    if check.severity == dg.AssetCheckSeverity.WARN or check.passed:
        return check
    return dg.AssetCheckResult(
        check_name=check.check_name,
        asset_key=check.asset_key,
        passed=False,
        severity=dg.AssetCheckSeverity.WARN,
        description=f"{check.description} (judged in the summary run: recorded, not gating)",
        metadata=check.metadata,
    )


def _nights(count: int) -> str:
    return plural(count, "night")


def _verdict(judged: Judged, spans: dict[SpanKey, dict[str, Any]]) -> TestVerdict:
    v = judged.verdict
    return TestVerdict(
        suite=judged.suite,
        test_key=judged.test_key,
        test_id=judged.test_id,
        state=v.state,
        reason=v.reason,
        pass_rate=v.pass_rate,
        quarantined=judged.quarantined,
        new_failure=judged.new_failure,
        first_bad=v.first_bad,
        last_good=v.last_good,
        suspects={
            repo: spans.get((repo, good, bad), {"good": good, "bad": bad, "commits": []})
            for repo, (good, bad) in v.suspects.items()
        },
    )


def _table(judged: list[Judged]) -> str:
    rows = [
        f"| {j.suite} | `{j.test_id}` | {j.verdict.state}{' (quarantined)' if j.quarantined else ''} "
        f"| {'' if j.verdict.pass_rate is None else f'{j.verdict.pass_rate:.0%}'} | {j.verdict.reason} |"
        for j in judged[: SHOWN * 3]
    ]
    more = [f"| … | {len(judged) - SHOWN * 3} more | | | |"] if len(judged) > SHOWN * 3 else []
    return "| suite | test | verdict | pass rate | why |\n|---|---|---|---|---|\n" + "\n".join(rows + more)


KIND = StageKind(
    "test_health", SuiteHealthParams, build_test_health_asset, frozenset({"sql"}), frozenset({ORCHESTRATOR})
)
