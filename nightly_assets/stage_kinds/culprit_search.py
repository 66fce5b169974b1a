"""The culprit_search stage (opt-in, outside the nightly job): for each test that started failing
on the night and each benchmark regression confirmed on it, bisect the commits between the last
good and the first bad night, re-running only the failing tests (or the benchmark) at each probe,
and name the first bad commit. Its own job runs it, started by a sensor (culprits.sensors) or from
the UI or `nightly run`; the night's rows stay as the night wrote them."""

import datetime as dt
from collections.abc import Iterator
from typing import TYPE_CHECKING

import dagster as dg

from nightly_assets.artefacts.resources import ArtefactStoreResource
from nightly_assets.builds.resources import PythonBuildResource
from nightly_assets.culprits import checks
from nightly_assets.culprits.params import CulpritSearchParams
from nightly_assets.results import NightKey
from nightly_assets.sources.resources import GitSourcesResource
from nightly_assets.stage_kinds.spec import ORCHESTRATOR, StageKind
from nightly_assets.stages import StageSpec, recorded_stage, stage_events
from nightly_assets.testing.resources import LocalTestRunnerResource
from nightly_assets.warehouse.resources import WarehouseResource

if TYPE_CHECKING:  # the search (git, builds, test runs) is imported by the asset when it runs
    from nightly_assets.culprits.search import Subject
    from nightly_assets.warehouse.store import Warehouse


def build_culprit_search_asset(spec: StageSpec) -> dg.AssetsDefinition:
    params = spec.params(CulpritSearchParams)

    @dg.asset(**spec.asset_args(check_specs=checks.culprit_check_specs(spec.key)))
    def _culprit_search(
        context: dg.AssetExecutionContext,
        artefacts: ArtefactStoreResource,
        warehouse: WarehouseResource,
        git: GitSourcesResource,
        builder: PythonBuildResource,
        test_runner: LocalTestRunnerResource,
    ) -> Iterator[dg.MaterializeResult | dg.AssetCheckResult]:
        """The first bad commit of each new failure and regression of the night."""
        from nightly_assets.culprits.search import Searcher

        with recorded_stage(context, spec, artefacts, warehouse) as run:
            store = warehouse.store()
            subjects = subjects_of(store, run.key, params.max_tests)
            searcher = Searcher(
                spec.pipeline,
                store,
                run.key,
                run.workdir,
                git,
                builder,
                test_runner,
                params,
                context.log.info,
            )
            found = [searcher.search(subject) for subject in subjects]
            store.record_culprits(run.key, found)
            run.manifest["culprits"] = [vars(c) for c in found]
            run.checks.append(checks.first_bad_commit(spec.key, found))
            named = sum(c.outcome == "found" for c in found)
            run.detail = f"{named} of {len(found)} culprits named" if found else "nothing to search"
        table = "| subject | outcome | commit | why |\n|---|---|---|---|\n" + "\n".join(
            f"| {c.subject} | {c.outcome} | {(c.commit or '')[:10]} {c.author or ''} | {c.detail} |"
            for c in found
        )
        yield from stage_events(run, {"culprits": dg.MetadataValue.md(table)})

    return _culprit_search


def subjects_of(store: "Warehouse", key: NightKey, max_tests: int) -> "list[Subject]":
    """The night's new failures (per suite, those that last passed on the same night) and the
    benchmark regressions confirmed on it."""
    from nightly_assets.culprits.search import Subject

    groups: dict[tuple[str, dt.date, dt.date], list[str]] = {}
    for verdict in store.verdicts(key, state="broken"):
        if verdict.new_failure and verdict.first_bad is not None and verdict.last_good is not None:
            groups.setdefault((verdict.suite, verdict.last_good, verdict.first_bad), []).append(
                verdict.test_id
            )
    subjects = [
        Subject(stage=suite, last_good=last_good, first_bad=first_bad, tests=tests[:max_tests])
        for (suite, last_good, first_bad), tests in groups.items()
    ]
    for regression in store.regressions(key.pipeline, target=key.target):
        if regression.night == key.night and regression.worse:
            subjects.append(
                Subject(
                    stage=None,
                    last_good=regression.last_good,
                    first_bad=regression.first_bad,
                    benchmark=(regression.name, regression.before, regression.after),
                )
            )
    return subjects


KIND = StageKind(
    "culprit_search",
    CulpritSearchParams,
    build_culprit_search_asset,
    frozenset({"git"}),
    frozenset({ORCHESTRATOR}),
)
