"""`nightly run` materializes one night through the Dagster instance; `nightly status` shows the nights."""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import sys
from pathlib import Path

import dagster as dg

from nightly_assets.catalog.loader import CatalogError, catalog_dir, load_catalog
from nightly_assets.catalog.models import Catalog, Pipeline
from nightly_assets.night import run_night
from nightly_assets.pipelines import nightly_job_name
from nightly_assets.reporting.summary import summary_markdown, summary_rows
from nightly_assets.resources import resources_for
from nightly_assets.results import NightKey
from nightly_assets.settings import nightly_env, nightly_home

REPO_DAGSTER_YAML = Path(__file__).resolve().parents[1] / "dagster.yaml"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="nightly", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="materialize one night of a pipeline, target by target")
    run.add_argument("pipeline")
    run.add_argument("--night", required=True, help="YYYY-MM-DD (UTC)")
    run.add_argument("--target", help="one target of the pipeline's matrix (default: all)")
    sub.add_parser("init", help="set up DAGSTER_HOME (dagster.yaml, pool limits from the catalog)")
    status = sub.add_parser("status", help="nights x targets x stages with state and test counts")
    status.add_argument("--pipeline", help="only this pipeline")
    status.add_argument("--json", action="store_true", help="machine-readable output")
    args = parser.parse_args(argv)
    try:
        catalog = load_catalog()
        if args.command == "init":
            instance(catalog)
            print(
                f"DAGSTER_HOME={os.environ['DAGSTER_HOME']}: pools "
                + ", ".join(f"{pool}={limit}" for pool, limit in sorted(catalog.pools.items()))
            )
            return 0
        if args.command == "run":
            return _run(catalog, args.pipeline, args.night, args.target)
        return _status(catalog, args.pipeline, args.json)
    except (CatalogError, UsageError) as exc:
        print(f"nightly: {exc}", file=sys.stderr)
        return 2


class UsageError(ValueError):
    pass


def instance(catalog: Catalog) -> dg.DagsterInstance:
    """The instance under DAGSTER_HOME (default ./.dagster_home), with the repo's dagster.yaml and pools."""
    home = Path(os.environ.setdefault("DAGSTER_HOME", str(Path.cwd() / ".dagster_home")))
    home.mkdir(parents=True, exist_ok=True)
    if not (home / "dagster.yaml").exists() and REPO_DAGSTER_YAML.is_file():
        shutil.copyfile(REPO_DAGSTER_YAML, home / "dagster.yaml")
    inst = dg.DagsterInstance.get()
    for pool, limit in catalog.pools.items():
        inst.event_log_storage.set_concurrency_slots(pool, limit)
    return inst


def _run(catalog: Catalog, name: str, night_text: str, target: str | None) -> int:
    pipeline = _pipeline(catalog, name)
    night = _night(pipeline, night_text)
    targets = [t.name for t in pipeline.targets]
    if target is not None and target not in targets:
        raise UsageError(f"--target {target!r}: pipeline '{name}' has targets {', '.join(targets)}")
    from nightly_assets.definitions import build_definitions  # loads the whole graph: only when running

    defs = build_definitions(catalog_dir())
    inst = instance(catalog)
    resources = resources_for(nightly_env(), nightly_home())
    worst = 0
    for t in [target] if target else targets:
        key = NightKey(name, night, t)
        print(f"== {key}: materializing {nightly_job_name(name)} (instance {os.environ['DAGSTER_HOME']})")
        outcome = run_night(defs, inst, catalog, key, resources["notifier"], progress=_say)
        for alert in outcome.alerts:
            print(f"!! alert ({alert.severity}): {alert.title}: " + "; ".join(alert.lines)[:400])
        store = resources["warehouse"].store()
        print()
        print(summary_markdown(key, summary_rows(pipeline, key, store), store.suite_counts(key)))
        night_row = store.night(key)
        worst = max(
            worst, 0 if outcome.succeeded and night_row is not None and night_row.status == "success" else 1
        )
    return worst


def _say(line: str) -> None:
    print(f"  {line}", flush=True)


def _status(catalog: Catalog, only: str | None, as_json: bool) -> int:
    pipelines = [_pipeline(catalog, only)] if only else list(catalog.pipelines.values())
    resources = resources_for(nightly_env(), nightly_home())
    store = resources["warehouse"].store()
    rows = []
    for pipeline in pipelines:
        for night in sorted(store.nights(pipeline.name), key=lambda n: (n.night, n.target), reverse=True):
            key = NightKey(pipeline.name, night.night, night.target)
            stages = {s.stage: s.status for s in store.stages(key)}
            rows.append(
                {
                    "pipeline": pipeline.name,
                    "night": night.night.isoformat(),
                    "target": night.target,
                    "status": night.status,
                    "run_id": night.run_id,
                    "pins": night.pins,
                    "stages": {s.name: stages.get(s.name, "skipped") for s in pipeline.stages},
                    "tests": store.suite_counts(key),
                }
            )
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
            f"  {'night':<10}  {'target':<14}  {'status':<8}  {'tests passed/run':<16}  "
            f"stages ({' '.join(names)})"
        )
        for r in mine:
            ran = sum(c["total"] - c["skipped"] - c["collected"] for c in r["tests"].values())
            passed = sum(c["passed"] for c in r["tests"].values())
            marks = " ".join(_MARKS.get(r["stages"][n], "?") for n in names)
            print(
                f"  {r['night']:<10}  {r['target']:<14}  {r['status']:<8}  {f'{passed}/{ran}':<16}  {marks}"
            )
        print()
    print("stage marks: + success, x failure, - skipped, ~ running")
    return 0


_MARKS = {"success": "+", "failure": "x", "skipped": "-", "running": "~"}


def _pipeline(catalog: Catalog, name: str) -> Pipeline:
    if name not in catalog.pipelines:
        raise UsageError(
            f"unknown pipeline {name!r}; the catalog has: {', '.join(sorted(catalog.pipelines))}"
        )
    return catalog.pipelines[name]


def _night(pipeline: Pipeline, text: str) -> dt.date:
    try:
        night = dt.date.fromisoformat(text)
    except ValueError:
        raise UsageError(f"--night {text!r}: expected a date as YYYY-MM-DD") from None
    today = dt.datetime.now(dt.UTC).date()
    if not pipeline.start_date <= night < today:
        raise UsageError(
            f"--night {text}: pipeline '{pipeline.name}' has nights from {pipeline.start_date} "
            f"to {today - dt.timedelta(days=1)} (a night can run once it has ended, UTC)"
        )
    return night


if __name__ == "__main__":
    sys.exit(main())
