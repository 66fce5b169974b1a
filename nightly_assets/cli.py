"""`nightly run` materializes one night through the Dagster instance; `nightly status` shows the nights."""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import gc
import json
import logging
import os
import re
import signal
import sys
import warnings
from collections.abc import Iterator
from importlib import resources as package_files
from pathlib import Path
from typing import TYPE_CHECKING, Any, overload

from nightly_assets import history_cli

if TYPE_CHECKING:  # the modules behind a command are imported by that command: `--help` answers at once
    import dagster as dg

    from nightly_assets.catalog.models import Catalog, Pipeline
    from nightly_assets.catalog.outline import CatalogOutline, PipelineOutline

# The instance config `nightly init` writes into DAGSTER_HOME, shipped in the package (the repo root's
# dagster.yaml links to it): an install from the wheel has it without the repository.
PACKAGED_DAGSTER_YAML = package_files.files("nightly_assets") / "instance" / "dagster.yaml"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="nightly", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="materialize one night of a pipeline, target by target")
    run.add_argument("pipeline")
    run.add_argument("--night", required=True, help="YYYY-MM-DD (UTC)")
    run.add_argument("--target", help="one target of the pipeline's matrix (default: all)")
    culprits = sub.add_parser(
        "culprits", help="bisect a night's new failures and regressions to their commit"
    )
    culprits.add_argument("pipeline")
    culprits.add_argument("--night", required=True, help="YYYY-MM-DD (UTC)")
    culprits.add_argument("--target", help="one target of the pipeline's matrix (default: all)")
    sub.add_parser(
        "init",
        help="set up DAGSTER_HOME (dagster.yaml, pool limits from the catalog) and, in local mode, "
        "$NIGHTLY_HOME/wheelhouse (offline build backends and test tools)",
    )
    status = sub.add_parser("status", help="nights x targets x stages with state and test counts")
    status.add_argument("--pipeline", help="only this pipeline")
    status.add_argument("--json", action="store_true", help="machine-readable output")
    history_cli.add_parser(sub)
    serve = sub.add_parser("serve", help="serve the artefact folders (logs, JUnit, summaries) over HTTP")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=3001)
    args = parser.parse_args(argv)
    try:
        code = _command(args, own_process=argv is None)
        sys.stdout.flush()  # here, where a reader that has gone is caught, not at exit
        if argv is None:  # the process's own command line: it exits next
            _skip_collection_at_exit()
        return code
    except BrokenPipeError:
        # The reader stopped early (`nightly status | head`): it has what it asked for. What is
        # still buffered has nowhere to go; flushing it at exit would raise again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except KeyboardInterrupt:
        print("nightly: interrupted", file=sys.stderr)
        return INTERRUPTED
    except _user_errors() as exc:  # evaluated only when something else was raised
        print(f"nightly: {exc}", file=sys.stderr)
        return 2


def _night_begins() -> None:
    """Starting up (Dagster, the catalog, the definitions, the instance) makes some 400,000 objects
    that live as long as the process: collecting garbage while they are made finds next to none and costs a
    `nightly run` over half a second, and each full collection during the night would walk them
    all again. Where `_command` turned collection off for starting up, they are frozen (never
    walked again) and collection resumes for what the night makes."""
    if not gc.isenabled():
        gc.freeze()
        gc.enable()


def _skip_collection_at_exit() -> None:
    """A run leaves Dagster's and the stages' objects behind; the garbage collector walking them
    while the interpreter shuts down costs a `nightly run` a second or more. The process is ending:
    its output is flushed, the warehouse and Dagster have committed, atexit handlers still run;
    only objects in reference cycles are left to the OS to free."""
    gc.disable()
    gc.freeze()


def _user_errors() -> tuple[type[Exception], ...]:
    """The errors that are the user's to fix: one line and exit 2, no traceback."""
    from nightly_assets.catalog.loader import CatalogError
    from nightly_assets.warehouse.store import WarehouseError

    return (CatalogError, UsageError, WarehouseError, SettingsError, history_cli.TargetError)


def _command(args: argparse.Namespace, own_process: bool = False) -> int:
    """Run the parsed command; its exit status. `own_process`: the command is this process's own
    command line (not a call from Python), so it may tune the process's garbage collection."""
    if args.command in ("status", "tests"):  # questions to the warehouse: no dagster, no resources
        outline = _catalog_outline()
        if args.command == "tests":
            return _tests(outline, args)
        return _status(outline, args.pipeline, args.json)
    if own_process and args.command in ("run", "culprits"):
        gc.disable()  # until `_night_begins`: what starting up makes lives as long as the process
    import dagster as dg  # the catalog's stage kinds import it anyway

    from nightly_assets.catalog.loader import load_catalog
    from nightly_assets.settings import nightly_home

    for category in (dg.BetaWarning, dg.PreviewWarning):  # notes for Dagster's developers, not ours
        warnings.filterwarnings("ignore", category=category)
    # A night needs its own pipeline alone (the others' stage kinds stay unimported).
    catalog = load_catalog(only=args.pipeline if args.command in ("run", "culprits") else None)
    if args.command == "init":
        return _init(catalog)
    if args.command == "serve":
        from nightly_assets.artefacts.serve import serve_artefacts

        return serve_artefacts(nightly_home() / "artefacts", args.host, args.port)
    if args.command == "run":
        return _run(catalog, args.pipeline, args.night, args.target)
    return _culprits(catalog, args.pipeline, args.night, args.target)


def _catalog_outline() -> CatalogOutline | Catalog:
    """The pipelines' names, titles, targets and stages, read plainly; the validated catalog where
    the plain read cannot tell (it then says what is wrong)."""
    from nightly_assets.catalog.outline import load_outline

    outline = load_outline()
    if outline is not None:
        return outline
    from nightly_assets.catalog.loader import load_catalog

    return load_catalog()


INTERRUPTED = 130  # 128 + SIGINT, for Ctrl-C and SIGTERM alike
STATUS_RETRY_S = 5.0  # `nightly status` says a database is down after this, not after a minute


class SettingsError(ValueError):
    """A setting the resources need is missing or malformed (e.g. an unset variable in prod)."""


@contextlib.contextmanager
def _resources(instance: dg.DagsterInstance, definitions: dict[str, Any]) -> Iterator[Any]:
    """The code location's resources (`definitions`, from `resources_for`) as a run sees them:
    EnvVars resolved, nested resources built (on `instance`: without one, Dagster would make an
    ephemeral instance for them)."""
    import dagster as dg

    from nightly_assets.settings import env_var_names, nightly_env

    unset = sorted(name for name in env_var_names(definitions) if not os.environ.get(name))
    if unset:
        raise SettingsError(f"resources ({nightly_env()}): {_unset_message(unset)}")
    try:
        with dg.build_resources(definitions, instance=instance) as resources:
            yield resources
    except dg.DagsterInvalidConfigError as exc:
        raise SettingsError(f"resources ({nightly_env()}): {_config_error(exc)}") from None
    except dg.DagsterResourceFunctionError as exc:
        # A value a resource's checks refuse (NIGHTLY_BATCH_KIND=pbs, a malformed runner pool file).
        if not isinstance(exc.__cause__, ValueError):
            raise
        raise SettingsError(f"resources ({nightly_env()}): {_value_error(exc.__cause__)}") from None


@contextlib.contextmanager
def _warehouse() -> Iterator[Any]:
    """The warehouse alone, for a person waiting on a query (`status`, `tests`): the other resources
    and their SDKs are not loaded, and a lost connection is retried for STATUS_RETRY_S only. The URL
    is chosen as `resources_for` chooses it."""
    from nightly_assets.settings import WAREHOUSE_URL_VAR, local_warehouse_url, nightly_env, nightly_home
    from nightly_assets.warehouse.store import Warehouse

    url = os.environ.get(WAREHOUSE_URL_VAR)
    if not url and nightly_env() == "prod":
        raise SettingsError(f"warehouse (prod): {_unset_message([WAREHOUSE_URL_VAR])}")
    store = Warehouse(url or local_warehouse_url(nightly_home()), retry_s=STATUS_RETRY_S)
    try:
        yield store
    finally:
        store.dispose()


def _unset_message(names: list[str]) -> str:
    return f"environment variable(s) not set: {', '.join(names)} (see the README's Configuration)"


_UNSET_VARIABLE = re.compile(r'environment variable "(\w+)" which is not set')


def _config_error(exc: dg.DagsterInvalidConfigError) -> str:
    messages = [getattr(e, "message", str(e)) for e in getattr(exc, "errors", [])] or [str(exc)]
    unset = sorted({m for text in messages for m in _UNSET_VARIABLE.findall(text)})
    if unset:
        return _unset_message(unset)
    return "; ".join(" ".join(m.split("Stack Trace")[0].split()) for m in messages)


def _value_error(exc: ValueError) -> str:
    """One line: `Resource: field: message` for each field pydantic refused, or the message."""
    import pydantic

    if isinstance(exc, pydantic.ValidationError):
        fields = (
            f"{'.'.join(map(str, e['loc']))}: {e['msg'].removeprefix('Value error, ')}" for e in exc.errors()
        )
        return f"{exc.title}: " + "; ".join(fields)
    return str(exc)


def _sigterm_as_interrupt() -> None:
    """SIGTERM ends a night as Ctrl-C does (Dagster maps it so while a step runs; this covers the
    moments between runs): the running stage is interrupted, cleans up, the night is cancelled."""
    signal.signal(signal.SIGTERM, signal.default_int_handler)


class UsageError(ValueError):
    pass


def instance(catalog: Catalog) -> dg.DagsterInstance:
    """The instance under DAGSTER_HOME (default ./.dagster_home), with the packaged dagster.yaml and pools."""
    import dagster as dg

    write_instance_config()
    inst = dg.DagsterInstance.get()
    storage = inst.event_log_storage
    # One read; a write (a transaction each) only for a pool whose limit the catalog changed.
    limits = {p.name: p.limit for p in storage.get_pool_limits() if not p.from_default}
    for pool, limit in catalog.pools.items():
        if limits.get(pool) != limit:
            storage.set_concurrency_slots(pool, limit)
    return inst


def write_instance_config() -> tuple[Path, bool]:
    """DAGSTER_HOME/dagster.yaml (DAGSTER_HOME defaults to ./.dagster_home) from the packaged file,
    where there is none yet; an operator's file (or link) is never overwritten. Returns the path and
    whether it was written."""
    home = Path(os.environ.setdefault("DAGSTER_HOME", str(Path.cwd() / ".dagster_home")))
    home.mkdir(parents=True, exist_ok=True)
    config = home / "dagster.yaml"
    if config.exists() or config.is_symlink():  # a dangling link is the operator's to fix, not ours
        return config, False
    config.write_bytes(PACKAGED_DAGSTER_YAML.read_bytes())
    return config, True


def _init(catalog: Catalog) -> int:
    """Set up this host: the instance config and pool limits, and in local mode the wheelhouse offline
    builds take their backends and test tools from. Says what it wrote and what it kept."""
    from nightly_assets.builds.resources import INDEX_URL_VAR, WHEELHOUSE_VAR
    from nightly_assets.builds.toolchain import MissingToolError
    from nightly_assets.builds.wheelhouse import WheelhouseError, ensure_wheelhouse, home_wheelhouse
    from nightly_assets.resources import local_package_sources
    from nightly_assets.settings import nightly_env, nightly_home

    config, written = write_instance_config()
    print(
        f"{config}: written from the packaged instance config"
        if written
        else f"{config}: already there, kept as it is"
    )
    instance(catalog)
    print(
        f"DAGSTER_HOME={os.environ['DAGSTER_HOME']}: pools "
        + ", ".join(f"{pool}={limit}" for pool, limit in sorted(catalog.pools.items()))
    )
    if nightly_env() != "local":
        print(f"no wheelhouse made: prod takes its packages from {INDEX_URL_VAR} and {WHEELHOUSE_VAR} only")
        return 0
    try:
        made = ensure_wheelhouse(home_wheelhouse(nightly_home()))
    except (WheelhouseError, MissingToolError) as exc:
        raise SettingsError(f"wheelhouse {home_wheelhouse(nightly_home())}: {exc}") from None
    if made.made:
        print(f"{made.folder}: made from this environment: {', '.join(made.wheels)}")
    else:
        print(f"{made.folder}: already there, kept as it is ({len(made.wheels)} wheels)")
    for name in made.missing:
        print(
            f"{made.folder}: no {name} (not installed here): projects whose build-system requires it "
            f"need {INDEX_URL_VAR} or {WHEELHOUSE_VAR}, or install {name} here, remove the folder and "
            "run init again"
        )
    print(f"local builds take their packages from {local_package_sources(nightly_home())}")
    return 0


def _run(catalog: Catalog, name: str, night_text: str, target: str | None) -> int:
    pipeline = _pipeline(catalog, name)
    night = _night(pipeline, night_text)
    targets = _targets(pipeline, target)
    from nightly_assets.night import run_night
    from nightly_assets.pipelines import nightly_job_name
    from nightly_assets.reporting.summary import night_summary
    from nightly_assets.resources import resources_for
    from nightly_assets.results import NightKey
    from nightly_assets.settings import nightly_env, nightly_home

    definitions = resources_for(nightly_env(), nightly_home())
    defs = pipeline_definitions(catalog, pipeline, definitions)
    inst = instance(catalog)
    _sigterm_as_interrupt()
    worst = 0
    with _resources(inst, definitions) as resources:
        store = resources.warehouse.store()
        _night_begins()
        for t in targets:
            key = NightKey(name, night, t)
            print(f"== {key}: materializing {nightly_job_name(name)} (instance {os.environ['DAGSTER_HOME']})")
            outcome = run_night(defs, inst, catalog, key, definitions, progress=_say)
            for index, alert in enumerate(outcome.alerts):
                print(f"!! alert ({alert.severity}): {alert.title}")
                for line in alert.lines:
                    print("   - " + line.replace("\n", "\n     "))
                if index in outcome.unsent:
                    print(
                        f"   (not sent: {outcome.unsent[index]}; the daemon's night_status_repair "
                        "sends it again)"
                    )
            summary = night_summary(pipeline, key, store, resources.artefacts)
            print()
            print(summary.markdown())
            if outcome.cancelled:
                print(f"nightly: {key} interrupted; the night is cancelled", file=sys.stderr)
                return INTERRUPTED
            night_row = store.night(key)
            ok = outcome.succeeded and night_row is not None and night_row.status in ("success", "warn")
            worst = max(worst, 0 if ok else 1)
    return worst


def _culprits(catalog: Catalog, name: str, night_text: str, target: str | None) -> int:
    """Run the pipeline's culprit search job for the night, as its sensor would, and print what it named."""
    pipeline = _pipeline(catalog, name)
    if not pipeline.stages_of("culprit_search"):
        raise UsageError(f"pipeline '{name}' has no culprit_search stage (see the README's Culprit search)")
    night = _night(pipeline, night_text)
    targets = _targets(pipeline, target)
    from nightly_assets.culprits.checks import culprit_line
    from nightly_assets.culprits.sensors import culprit_job_name
    from nightly_assets.night import execute_partition
    from nightly_assets.reporting.alerts import record_sent
    from nightly_assets.reporting.follow_up import follow_up_run
    from nightly_assets.resources import resources_for
    from nightly_assets.results import NightKey
    from nightly_assets.settings import nightly_env, nightly_home

    definitions = resources_for(nightly_env(), nightly_home())
    defs = pipeline_definitions(catalog, pipeline, definitions)
    inst = instance(catalog)
    _sigterm_as_interrupt()
    worst = 0
    with _resources(inst, definitions) as resources:
        store = resources.warehouse.store()
        _night_begins()
        for t in targets:
            key = NightKey(name, night, t)
            print(f"== {key}: {culprit_job_name(name)}")
            succeeded, run = execute_partition(defs, inst, culprit_job_name(name), key, _say)
            done = follow_up_run(inst, run, catalog, resources.notifier, store)
            if done is not None:
                record_sent(inst, catalog, done.alerts, resources.notifier, done.unsent)
            for alert in done.alerts if done else []:
                print(f"!! alert ({alert.severity}): {alert.title}")
            for found in store.culprits(key):
                print(f"  {culprit_line(found)}")
            worst = max(worst, 0 if succeeded else 1)
    return worst


def pipeline_definitions(catalog: Catalog, pipeline: Pipeline, resources: dict[str, Any]) -> dg.Definitions:
    """The one pipeline's assets and jobs with the code location's `resources`: what a run of its jobs
    executes (each job selects its own pipeline's group). The whole code location
    (`definitions.py`) would build every other pipeline's stages too, seconds of every `nightly run`,
    and importing it builds them once more."""
    import dagster as dg

    from nightly_assets.catalog.loader import catalog_dir
    from nightly_assets.pipelines import build_pipeline
    from nightly_assets.settings import nightly_env

    built = build_pipeline(catalog, catalog_dir(), pipeline, nightly_env())
    return dg.Definitions(assets=built.assets, jobs=built.jobs, resources=resources)


def _targets(pipeline: Pipeline, target: str | None) -> list[str]:
    """The --target given (one of the pipeline's), or every target of the pipeline."""
    targets = [t.name for t in pipeline.targets]
    if target is not None and target not in targets:
        raise UsageError(f"--target {target!r}: pipeline '{pipeline.name}' has targets {', '.join(targets)}")
    return [target] if target else targets


def _say(line: str) -> None:
    print(f"  {line}", flush=True)


def _status(catalog: Catalog | CatalogOutline, only: str | None, as_json: bool) -> int:
    pipelines: list[Pipeline | PipelineOutline] = (
        [_pipeline(catalog, only)] if only else list(catalog.pipelines.values())
    )
    _quiet_warehouse_logs()
    with _warehouse() as store:
        rows = _status_rows(store, pipelines)
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
            for check in r["failed_checks"]:
                why = " ".join(check["description"].split())  # the count and the first failing tests
                name = f"{check['stage']}:{check['check']} ({check['severity']})"
                print(f"  {'':<10}  {'':<14}  ! {name}: {why}"[:220])
        print()
    print("stage marks: + success, x failure, - skipped, ~ running, c cancelled")
    return 0


def _quiet_warehouse_logs() -> None:
    """Each warehouse retry and schema upgrade is logged (a run shows them as it goes); for a
    person waiting on a query the error is one line."""
    from nightly_assets.warehouse import connection as warehouse_connection
    from nightly_assets.warehouse import store as warehouse_store

    for module in (warehouse_store, warehouse_connection):
        logging.getLogger(module.__name__).setLevel(logging.ERROR)


def _tests(catalog: Catalog | CatalogOutline, args: argparse.Namespace) -> int:
    pipeline = _pipeline(catalog, args.pipeline)
    _quiet_warehouse_logs()
    with _warehouse() as store:
        return history_cli.run(store, pipeline, args, _any_night)


def _any_night(pipeline: Pipeline | PipelineOutline, text: str) -> dt.date:
    """A --night as a date, any date: one to look up may still be running."""
    try:
        if not re.fullmatch(r"\d{4}-\d{2}-\d{2}", text):
            raise ValueError(text)
        return dt.date.fromisoformat(text)
    except ValueError:
        raise UsageError(f"--night {text!r}: expected a date as YYYY-MM-DD") from None


def _status_rows(store: Any, pipelines: list[Pipeline | PipelineOutline]) -> list[dict[str, Any]]:
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


_MARKS = {"success": "+", "failure": "x", "skipped": "-", "running": "~", "cancelled": "c"}


@overload
def _pipeline(catalog: Catalog, name: str) -> Pipeline: ...
@overload
def _pipeline(catalog: CatalogOutline, name: str) -> PipelineOutline: ...
def _pipeline(catalog: Catalog | CatalogOutline, name: str) -> Pipeline | PipelineOutline:
    """The pipeline `name` of a catalog or its outline."""
    if name not in catalog.pipelines:
        raise UsageError(
            f"unknown pipeline {name!r}; the catalog has: {', '.join(sorted(catalog.pipelines))}"
        )
    return catalog.pipelines[name]


def _night(pipeline: Pipeline, text: str) -> dt.date:
    """A --night to run: one of the pipeline's nights that has ended."""
    night = _any_night(pipeline, text)
    today = dt.datetime.now(dt.UTC).date()
    if not pipeline.start_date <= night < today:
        raise UsageError(
            f"--night {text}: pipeline '{pipeline.name}' has nights from {pipeline.start_date} "
            f"to {today - dt.timedelta(days=1)} (a night can run once it has ended, UTC)"
        )
    return night


if __name__ == "__main__":
    sys.exit(main())
