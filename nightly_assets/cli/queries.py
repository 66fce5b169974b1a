"""`nightly status` and `nightly tests`: questions to the warehouse from a shell, answered without
dagster, the code location or the other resources (`test_cli_imports.py` checks it)."""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from nightly_assets.cli import history as history_cli
from nightly_assets.cli.usage import SettingsError, UsageError, any_night, pipeline_named, unset_message

if TYPE_CHECKING:
    from nightly_assets.catalog.models import Catalog, Pipeline
    from nightly_assets.catalog.outline import CatalogOutline, PipelineOutline

STATUS_RETRY_S = 5.0  # `nightly status` says a database is down after this, not after a minute
_MARKS = {"success": "+", "failure": "x", "skipped": "-", "running": "~", "cancelled": "c"}


@contextlib.contextmanager
def query_warehouse() -> Iterator[Any]:
    """The warehouse alone, for a person waiting on a query (`status`, `tests`): the other resources
    and their SDKs are not loaded, and a lost connection is retried for STATUS_RETRY_S only. The URL
    is chosen as `resources_for` chooses it."""
    from nightly_assets.settings import WAREHOUSE_URL_VAR, local_warehouse_url, nightly_env, nightly_home
    from nightly_assets.unfinished_nights import end_and_say
    from nightly_assets.warehouse.store import Warehouse

    url = os.environ.get(WAREHOUSE_URL_VAR)
    if not url and nightly_env() == "prod":
        raise SettingsError(f"warehouse (prod): {unset_message([WAREHOUSE_URL_VAR])}")
    store = Warehouse(url or local_warehouse_url(nightly_home()), retry_s=STATUS_RETRY_S)
    try:
        end_and_say(store, nightly_home())
        yield store
    finally:
        store.dispose()


def status(catalog: Catalog | CatalogOutline, only: str | None, as_json: bool) -> int:
    pipelines: list[Pipeline | PipelineOutline] = (
        [pipeline_named(catalog, only)] if only else list(catalog.pipelines.values())
    )
    _quiet_warehouse_logs()
    with query_warehouse() as store:
        rows = status_rows(store, pipelines)
    if as_json:
        print(json.dumps(rows, indent=2))
        return 0
    if not rows:
        print("no nights recorded yet; run one with: nightly run demo --night YYYY-MM-DD")
        return 0
    for pipeline in pipelines:
        mine = [r for r in rows if r["pipeline"] == pipeline.name]
        if not mine:
            continue
        names = [s.name for s in pipeline.stages]
        print(f"{pipeline.name}: {pipeline.title}")
        print(
            f"  {'night':<10}  {'target':<14}  {'status':<9}  {'tests passed/run':<16}  "
            f"stages ({' '.join(names)})"
        )
        for r in mine:
            ran = sum(c["total"] - c["skipped"] - c["collected"] for c in r["tests"].values())
            passed = sum(c["passed"] for c in r["tests"].values())
            marks = " ".join(_MARKS.get(r["stages"][n], "?") for n in names)
            print(
                f"  {r['night']:<10}  {r['target']:<14}  {r['status']:<9}  {f'{passed}/{ran}':<16}  {marks}"
            )
            if r["detail"]:
                print(f"  {'':<10}  {'':<14}  ! {' '.join(r['detail'].split())}"[:220])
            for check in r["failed_checks"]:
                why = " ".join(check["description"].split())  # the count and the first failing tests
                name = f"{check['stage']}:{check['check']} ({check['severity']})"
                print(f"  {'':<10}  {'':<14}  ! {name}: {why}"[:220])
        print()
    print("stage marks: + success, x failure, - skipped, ~ running, c cancelled")
    return 0


def tests(catalog: Catalog | CatalogOutline, args: argparse.Namespace) -> int:
    pipeline = pipeline_named(catalog, args.pipeline)
    _quiet_warehouse_logs()
    with query_warehouse() as store:
        return history_cli.run(store, pipeline, args, any_night)


def shards_of_file(args: argparse.Namespace) -> int:
    """`nightly shards plan --durations FILE`: a plan from a file alone."""
    from nightly_assets.cli import shards as shards_cli

    if args.pipeline is not None:
        raise UsageError("shards plan: give a pipeline and its suite, or --durations FILE, not both")
    return shards_cli.run(args, shards_cli.durations_file(args.durations), f"--durations {args.durations}")


def shards(catalog: Catalog | CatalogOutline, args: argparse.Namespace) -> int:
    """`nightly shards plan PIPELINE SUITE`: a plan from the suite's recorded durations."""
    from nightly_assets.cli import shards as shards_cli
    from nightly_assets.words import plural

    if args.pipeline is None or args.suite is None:
        raise UsageError("shards plan: give a pipeline and its suite (demo tests_unit), or --durations FILE")
    if args.nights < 1:
        raise UsageError(f"--nights {args.nights}: expected 1 or more")
    pipeline = pipeline_named(catalog, args.pipeline)
    stages = [stage.name for stage in pipeline.stages]
    if args.suite not in stages:
        known = ", ".join(stages)
        raise UsageError(f"pipeline {pipeline.name!r} has no stage {args.suite!r}; its stages: {known}")
    target = history_cli.target_of(pipeline, args.target)
    _quiet_warehouse_logs()
    with query_warehouse() as store:
        durations, nights = store.suite_durations(pipeline.name, target, args.suite, nights=args.nights)
    where = f"{pipeline.name}/{args.suite} on {target}"
    if not durations:
        raise UsageError(f"{where}: no test durations recorded yet (run a night first, or use --durations)")
    span = f"{nights[-1]}..{nights[0]}" if len(nights) > 1 else f"{nights[0]}"
    source = f"{where}, mean of {plural(len(nights), 'night')} {span}"
    return shards_cli.run(args, durations, source)


def _quiet_warehouse_logs() -> None:
    """Each warehouse retry and schema upgrade is logged (a run shows them as it goes); for a
    person waiting on a query the error is one line."""
    from nightly_assets.warehouse import access, schema_upgrade

    for module in (access, schema_upgrade):
        logging.getLogger(module.__name__).setLevel(logging.ERROR)


def status_rows(store: Any, pipelines: list[Pipeline | PipelineOutline]) -> list[dict[str, Any]]:
    """One row per night x target, newest first: a bounded number of warehouse queries (the
    store's `night_overviews`), however many nights there are."""
    stages_of = {p.name: p.stages for p in pipelines}
    return [
        {
            "pipeline": o.night.pipeline,
            "night": o.night.night.isoformat(),
            "target": o.night.target,
            "status": o.night.status,
            "run_id": o.night.run_id,
            "detail": o.night.detail,
            "pins": o.night.pins,
            "stages": {s.name: o.stages.get(s.name, "skipped") for s in stages_of[o.night.pipeline]},
            "tests": o.suites,
            "failed_checks": [
                {
                    "stage": c.stage,
                    "check": c.name,
                    "severity": c.severity,
                    "description": c.description,
                }
                for c in o.checks
                if not c.passed
            ],
            # What each stage that recorded it ran on, with the configuration key of its baselines.
            "devices": {
                stage: {**facts.model_dump(), "config_key": facts.key()} for stage, facts in o.devices.items()
            },
        }
        for o in store.night_overviews([p.name for p in pipelines])
    ]


def site(catalog: Catalog) -> int:
    """`nightly site`: every pipeline's results site built from the warehouse, its link printed."""
    from nightly_assets.resources import artefact_store
    from nightly_assets.settings import nightly_env, nightly_home
    from nightly_assets.site.publish import update_site
    from nightly_assets.site.redaction import PublicSiteError

    artefacts = artefact_store(nightly_env(), nightly_home())
    code = 0
    with query_warehouse() as store:
        for pipeline in catalog.pipelines.values():
            try:
                build, link = update_site(pipeline, store, artefacts, log=logging.getLogger("nightly.site"))
            except PublicSiteError as exc:  # the others are still built
                print(f"nightly: {pipeline.name}: public results site not published: {exc}", file=sys.stderr)
                code = 1
                continue
            print(f"{pipeline.name}: {len(build.written)} files in {build.seconds:.1f} s, {link}")
    return code
