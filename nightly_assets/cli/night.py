"""`nightly run` and `nightly culprits`: one night of a pipeline (or its culprit search) run through
the Dagster instance, target by target, with the code location's resources as a run sees them."""

from __future__ import annotations

import contextlib
import gc
import os
import re
import signal
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from nightly_assets.cli.instance import instance
from nightly_assets.cli.usage import (
    INTERRUPTED,
    SettingsError,
    UsageError,
    night_to_run,
    pipeline_named,
    targets_to_run,
    unset_message,
)

if TYPE_CHECKING:
    import dagster as dg

    from nightly_assets.catalog.models import Catalog, Pipeline


def night_begins() -> None:
    """Starting up (Dagster, the catalog, the definitions, the instance) makes some 400,000 objects
    that live as long as the process: collecting garbage while they are made finds next to none and costs a
    `nightly run` over half a second, and each full collection during the night would walk them
    all again. Where `cli._command` turned collection off for starting up, they are frozen (never
    walked again) and collection resumes for what the night makes."""
    if not gc.isenabled():
        gc.freeze()
        gc.enable()


@contextlib.contextmanager
def _resources(instance: dg.DagsterInstance, definitions: dict[str, Any]) -> Iterator[Any]:
    """The code location's resources (`definitions`, from `resources_for`) as a run sees them:
    EnvVars resolved, nested resources built (on `instance`: without one, Dagster would make an
    ephemeral instance for them)."""
    import dagster as dg

    from nightly_assets.settings import env_var_names, nightly_env

    unset = sorted(name for name in env_var_names(definitions) if not os.environ.get(name))
    if unset:
        raise SettingsError(f"resources ({nightly_env()}): {unset_message(unset)}")
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


_UNSET_VARIABLE = re.compile(r'environment variable "(\w+)" which is not set')


def _config_error(exc: dg.DagsterInvalidConfigError) -> str:
    messages = [getattr(e, "message", str(e)) for e in getattr(exc, "errors", [])] or [str(exc)]
    unset = sorted({m for text in messages for m in _UNSET_VARIABLE.findall(text)})
    if unset:
        return unset_message(unset)
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


def run(catalog: Catalog, name: str, night_text: str, target: str | None) -> int:
    pipeline = pipeline_named(catalog, name)
    night = night_to_run(pipeline, night_text)
    targets = targets_to_run(pipeline, target)
    from nightly_assets.night import NightNotFinished, run_night
    from nightly_assets.pipelines import nightly_job_name
    from nightly_assets.reporting.summary import night_summary
    from nightly_assets.resources import resources_for
    from nightly_assets.results import NightKey
    from nightly_assets.settings import nightly_env, nightly_home
    from nightly_assets.unfinished_nights import end_and_say, note_unfinished

    definitions = resources_for(nightly_env(), nightly_home())
    defs = pipeline_definitions(catalog, pipeline, definitions)
    inst = instance(catalog)
    _sigterm_as_interrupt()
    worst = 0
    with _resources(inst, definitions) as resources:
        store = resources.warehouse.store()
        end_and_say(store, nightly_home())
        night_begins()
        for t in targets:
            key = NightKey(name, night, t)
            print(f"== {key}: materializing {nightly_job_name(name)} (instance {os.environ['DAGSTER_HOME']})")
            try:
                outcome = run_night(defs, inst, catalog, key, definitions, progress=_say)
            except NightNotFinished as exc:
                note = note_unfinished(nightly_home(), exc.key, exc.run_id, exc.cause)
                print(
                    f"nightly: {key} could not be ended ({note}): the next nightly command that reaches "
                    "the warehouse ends it as failed",
                    file=sys.stderr,
                )
                raise
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


def culprits(catalog: Catalog, name: str, night_text: str, target: str | None) -> int:
    """Run the pipeline's culprit search job for the night, as its sensor would, and print what it named."""
    pipeline = pipeline_named(catalog, name)
    if not pipeline.stages_of("culprit_search"):
        raise UsageError(f"pipeline '{name}' has no culprit_search stage (see docs/culprits.md)")
    night = night_to_run(pipeline, night_text)
    targets = targets_to_run(pipeline, target)
    from nightly_assets.culprits.checks import culprit_line
    from nightly_assets.culprits.sensors import culprit_job_name
    from nightly_assets.night import execute_partition
    from nightly_assets.reporting.alerts import record_sent
    from nightly_assets.reporting.follow_up import follow_up_run
    from nightly_assets.resources import resources_for
    from nightly_assets.results import NightKey
    from nightly_assets.settings import nightly_env, nightly_home
    from nightly_assets.unfinished_nights import end_and_say

    definitions = resources_for(nightly_env(), nightly_home())
    defs = pipeline_definitions(catalog, pipeline, definitions)
    inst = instance(catalog)
    _sigterm_as_interrupt()
    worst = 0
    with _resources(inst, definitions) as resources:
        store = resources.warehouse.store()
        end_and_say(store, nightly_home())
        night_begins()
        for t in targets:
            key = NightKey(name, night, t)
            print(f"== {key}: {culprit_job_name(name)}")
            succeeded, run = execute_partition(defs, inst, culprit_job_name(name), key, _say)
            done = follow_up_run(inst, run, catalog, resources.notifier, store)
            if done is not None:
                record_sent(
                    inst, catalog, done.alerts, resources.notifier, done.unsent, store, resources.artefacts
                )
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


def _say(line: str) -> None:
    print(f"  {line}", flush=True)
