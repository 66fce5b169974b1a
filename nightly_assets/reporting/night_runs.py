"""Which nights a finished run touched, read from the run's own events, whatever launched it.

A schedule tick, `nightly run`, "Materialize" on an asset group, a UI backfill (one run per
night) and a re-execution from failure all plan their assets with the same events, so alerts,
the follow-up summary and the night's final status do not depend on job names or run tags.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import dagster as dg

from nightly_assets.catalog.models import Catalog
from nightly_assets.partitions import night_key
from nightly_assets.results import NightKey

PARTITION_TAG = "dagster/partition"


@dataclass(frozen=True)
class CheckEvaluation:
    stage: str
    name: str
    partition: str | None
    passed: bool
    severity: str  # "ERROR" or "WARN"
    description: str


@dataclass(frozen=True)
class StepFailure:
    stage: str
    message: str  # the stage's own error, not Dagster's wrapper
    interrupted: bool  # Ctrl-C / SIGTERM / a terminated run, not the stage's own failure


@dataclass
class NightInRun:
    """One night x target of one pipeline that a run planned to materialize, and what came of it."""

    key: NightKey
    partition: str
    planned: set[str] = field(default_factory=set)  # stage names
    materialized: set[str] = field(default_factory=set)
    failed_steps: list[StepFailure] = field(default_factory=list)
    checks: list[CheckEvaluation] = field(default_factory=list)


@dataclass(frozen=True)
class RunRecord:
    """What one finished run did, by night."""

    run: dg.DagsterRun
    nights: list[NightInRun]
    run_error: str | None  # why the run failed when no step did (a lost worker, a resource error)

    @property
    def interrupted(self) -> bool:
        if self.run.status == dg.DagsterRunStatus.CANCELED:
            return True
        return any(f.interrupted for n in self.nights for f in n.failed_steps)


def read_run(instance: dg.DagsterInstance, run: dg.DagsterRun, catalog: Catalog) -> RunRecord:
    """The nights `run` planned (pipeline assets x partitions) with their failures and checks."""
    nights: dict[tuple[str, str], NightInRun] = {}
    step_stages: dict[str, list[tuple[NightInRun, str]]] = defaultdict(list)
    failures: list[tuple[str, str, bool]] = []  # step key, error, interrupted
    run_error: str | None = None
    records = instance.get_records_for_run(
        run.run_id,
        of_type={
            dg.DagsterEventType.ASSET_MATERIALIZATION_PLANNED,
            dg.DagsterEventType.ASSET_MATERIALIZATION,
            dg.DagsterEventType.STEP_FAILURE,
            dg.DagsterEventType.ASSET_CHECK_EVALUATION,
            dg.DagsterEventType.RUN_FAILURE,
        },
    ).records
    for record in records:
        event = record.event_log_entry.dagster_event
        if event is None:
            continue
        data = event.event_specific_data
        if event.event_type == dg.DagsterEventType.ASSET_MATERIALIZATION_PLANNED:
            stage = _stage_of(catalog, data.asset_key)  # type: ignore[union-attr]
            if stage is None:
                continue
            pipeline, name = stage
            for partition in _planned_partitions(data, run):
                night = nights.get((pipeline, partition))
                if night is None:
                    night = nights[(pipeline, partition)] = NightInRun(
                        night_key(pipeline, partition), partition
                    )
                night.planned.add(name)
                if event.step_key:
                    step_stages[event.step_key].append((night, name))
        elif event.event_type == dg.DagsterEventType.ASSET_MATERIALIZATION:
            materialization = event.step_materialization_data.materialization
            stage = _stage_of(catalog, materialization.asset_key)
            if stage and materialization.partition and (stage[0], materialization.partition) in nights:
                nights[(stage[0], materialization.partition)].materialized.add(stage[1])
        elif event.event_type == dg.DagsterEventType.STEP_FAILURE:
            failure_data = event.step_failure_data
            failures.append(
                (
                    event.step_key or "",
                    stage_error(failure_data.error, failure_data.user_failure_data),
                    was_interrupted(failure_data),
                )
            )
        elif event.event_type == dg.DagsterEventType.RUN_FAILURE:
            error = getattr(data, "error", None)
            run_error = stage_error(error, None) if error else (event.message or None)
        else:
            stage = _stage_of(catalog, data.asset_key)  # type: ignore[union-attr]
            if stage is None:
                continue
            evaluation = CheckEvaluation(
                stage=stage[1],
                name=data.check_name,  # type: ignore[union-attr]
                partition=data.partition or run.tags.get(PARTITION_TAG),  # type: ignore[union-attr]
                passed=data.passed,  # type: ignore[union-attr]
                severity=data.severity.value,  # type: ignore[union-attr]
                description=data.description or "",  # type: ignore[union-attr]
            )
            for night in nights.values():
                if night.key.pipeline == stage[0] and evaluation.partition in (None, night.partition):
                    night.checks.append(evaluation)
    for step_key, message, interrupted in failures:
        for night, name in step_stages.get(step_key, []):
            night.failed_steps.append(StepFailure(name, message, interrupted))
    return RunRecord(run, list(nights.values()), run_error)


# Dagster's exceptions around the error that matters: the stage's own (or a resource's) is their cause.
DAGSTER_WRAPPERS = (
    "DagsterExecutionStepExecutionError",
    "DagsterResourceFunctionError",
    "DagsterUserCodeProcessError",
)
# How Dagster's SerializableErrorInfo.to_string() lays out an error and its causes, which a
# DagsterUserCodeProcessError (an error from the code server) carries as its message.
_CAUSED_BY = "The above exception was caused by the following exception:"
_STACK_TRACE = re.compile(r"\n\s*Stack Trace:\n.*", re.DOTALL)
_WRAPPER_PREFIX = re.compile(rf"^(?:dagster\._core\.errors\.)?(?:{'|'.join(DAGSTER_WRAPPERS)}): ")


def stage_error(error: object, user_failure: object) -> str:
    """The stage's own error text: what the asset (or a resource) raised, without Dagster's wrapper
    around it and without the Dagster-internal stack trace (the run's logs keep that)."""
    description = getattr(user_failure, "description", None)
    if description:
        return str(description).strip()
    while (
        error is not None
        and getattr(error, "cause", None) is not None
        and any(w in (getattr(error, "cls_name", None) or error.message) for w in DAGSTER_WRAPPERS)  # type: ignore[attr-defined]
    ):
        error = error.cause  # type: ignore[attr-defined]
    if error is None:
        return "failed"
    return without_trace(str(error.message)) or "failed"  # type: ignore[attr-defined]


def without_trace(message: str) -> str:
    """The innermost cause of an error's text laid out by Dagster (message, stack trace, the
    causes after it), without the stack traces and Dagster's wrapper prefix."""
    innermost = message.split(_CAUSED_BY)[-1]
    return _WRAPPER_PREFIX.sub("", _STACK_TRACE.sub("", innermost).strip()).strip()


def _stage_of(catalog: Catalog, key: dg.AssetKey) -> tuple[str, str] | None:
    """(pipeline, stage) of a catalog asset key, None for any other asset."""
    if len(key.path) != 2:
        return None
    pipeline = catalog.pipelines.get(key.path[0])
    if pipeline is None or key.path[1] not in {s.name for s in pipeline.stages}:
        return None
    return key.path[0], key.path[1]


def _planned_partitions(data: object, run: dg.DagsterRun) -> list[str]:
    partition = getattr(data, "partition", None)
    if partition:
        return [str(partition)]
    subset = getattr(data, "partitions_subset", None)
    if subset is not None:  # a single-run backfill of a range of nights
        return [str(k) for k in subset.get_partition_keys()]
    tagged = run.tags.get(PARTITION_TAG)
    return [tagged] if tagged else []


def was_interrupted(failure_data: Any) -> bool:
    """A step failure that was the run being cancelled (Dagster's ErrorSource.INTERRUPT; the enum
    is not public, its value is)."""
    source = getattr(failure_data, "error_source", None)
    return getattr(source, "value", None) == "INTERRUPT"
