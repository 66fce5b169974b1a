"""What every stage asset shares: its spec from the catalog, and a run recorded in the warehouse."""

from __future__ import annotations

import contextlib
import time
import warnings
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar

import dagster as dg

from nightly_assets.artefacts.resources import ArtefactStoreResource
from nightly_assets.catalog.cadence import split_cell
from nightly_assets.catalog.fields import Arch
from nightly_assets.catalog.kinds import ORCHESTRATOR, StageParams, kind_rules
from nightly_assets.catalog.models import Catalog, Pipeline, Stage, Target
from nightly_assets.catalog.runner import Runner
from nightly_assets.catalog.suite import Suite
from nightly_assets.devices.facts import DeviceFacts
from nightly_assets.manifests import PinnedRepo, SourcesManifest
from nightly_assets.night_lease import SUMMARY_OF_TAG, hold_night
from nightly_assets.partitions import night_key
from nightly_assets.reporting.night_runs import DAGSTER_WRAPPERS, without_trace
from nightly_assets.results import CheckOutcome, NightKey
from nightly_assets.warehouse.resources import WarehouseResource

P = TypeVar("P", bound=StageParams)


class StageNotAvailable(RuntimeError):
    """The stage cannot run where the night put it; the message says what it needs instead."""


ENVIRONMENT_KINDS = ("environment", "docker_image")  # stages that make the night's Python


@dataclass(frozen=True)
class Upstream:
    """A stage upstream of another, with its kind."""

    name: str
    kind: str


@dataclass(frozen=True)
class StageSpec:
    """One stage of one pipeline, resolved from the catalog once, when the definitions are built.

    Besides the catalog's own records (`pipeline`, `stage`) it holds what the stage's asset builder
    and its run ask of the catalog, answered: its key, the stages upstream with their kinds and
    the nearest environment among them, its suite, its runner per target arch with their kinds
    and pool, the repository it works on and the sources stage that pinned it, its targets and
    its kind's tags. So neither the builder nor the run goes back to the catalog to ask.
    """

    catalog: Catalog
    catalog_dir: Path
    pipeline: Pipeline
    stage: Stage
    partitions_def: dg.MultiPartitionsDefinition
    # Resolved from the five above by __post_init__ (not compared: they follow from them).
    key: dg.AssetKey = field(init=False, compare=False)
    upstream_stages: tuple[Upstream, ...] = field(init=False, compare=False)  # nearest first
    environment: Upstream | None = field(init=False, compare=False)  # nearest environment/docker_image
    suite: Suite | None = field(init=False, compare=False)  # a test_suite stage's (the catalog asks one)
    runners: Mapping[Arch, tuple[str, Runner | None]] = field(init=False, compare=False)  # by target arch
    runner_names: tuple[str, ...] = field(init=False, compare=False)  # every runner it names
    runner_kinds: tuple[str | None, ...] = field(init=False, compare=False)  # sorted; (None,): none named
    pool: str | None = field(init=False, compare=False)  # the Dagster pool its runners hold
    targets: Mapping[str, Target] = field(init=False, compare=False)  # the partition's target by name
    repo_name: str = field(init=False, compare=False)  # `params.repo`, else the pipeline's first
    sources_stage: str = field(init=False, compare=False)  # the stage that pins the night's checkouts
    kind_tags: frozenset[str] = field(init=False, compare=False)  # its kind's kinds tags in the UI

    def __post_init__(self) -> None:
        pipeline, stage, catalog = self.pipeline, self.stage, self.catalog
        kind_of = {s.name: s.kind for s in pipeline.stages}
        upstream = tuple(Upstream(name, kind_of[name]) for name in pipeline.upstream(stage.name))
        names = tuple(stage.runner_names())
        resolved: dict[str, Any] = dict(
            key=dg.AssetKey([pipeline.name, stage.name]),
            upstream_stages=upstream,
            environment=next((u for u in upstream if u.kind in ENVIRONMENT_KINDS), None),
            suite=stage.suite,
            runners={t.arch: _runner_for(catalog, stage, t.arch) for t in pipeline.targets},
            runner_names=names,
            runner_kinds=tuple(sorted({catalog.runners[n].kind for n in names})) or (None,),
            pool=next((p for p in (catalog.runners[n].pool for n in names) if p), None),
            targets={t.name: t for t in pipeline.targets},
            repo_name=getattr(stage.typed_params, "repo", None) or pipeline.repositories[0].name,
            sources_stage=next(s.name for s in pipeline.stages if s.kind == "sources"),
            kind_tags=kind_rules(stage.kind).kinds,
        )
        for name, value in resolved.items():
            object.__setattr__(self, name, value)  # frozen: set once, here

    def dep_key(self, stage: str) -> dg.AssetKey:
        return dg.AssetKey([self.pipeline.name, stage])

    def upstream(self) -> list[str]:
        """Every stage upstream of this one, nearest first (breadth first)."""
        return [u.name for u in self.upstream_stages]

    def upstream_stage(self, *kinds: str) -> str | None:
        """The nearest stage upstream of this one whose kind is one of `kinds`."""
        return next((u.name for u in self.upstream_stages if u.kind in kinds), None)

    def pinned_repo(
        self, artefacts: ArtefactStoreResource, key: NightKey, repo: str | None = None
    ) -> PinnedRepo:
        """The sources stage's record of `repo` (default: the stage's `params.repo`, else the first):
        its night's checkout (`path`), `sha`, `url` and `branch`."""
        manifest = artefacts.manifest(key, self.sources_stage, SourcesManifest)
        return manifest.repos[repo or self.repo_name]

    def params(self, model: type[P]) -> P:
        """The stage's `params`, as its kind's model validated them when the catalog loaded."""
        params = self.stage.typed_params
        if not isinstance(params, model):
            raise TypeError(
                f"{self.key.to_user_string()}: params are {type(params).__name__}, not {model.__name__}"
            )
        return params

    def output_key(self, key: NightKey) -> str:
        """Where this stage's Bazel builds of its repository for `key`'s target persist across
        nights (stages of one night on the same repository share it)."""
        return f"{key.pipeline}.{key.target}.{self.repo_name}"

    def checkout(self, artefacts: ArtefactStoreResource, key: NightKey) -> Path:
        """The night's pinned checkout of the stage's repository."""
        return Path(self.pinned_repo(artefacts, key).path)

    def runner(self, target: Target) -> tuple[str, Runner | None]:
        """The runner the stage uses for `target` (its name, and None for the orchestrator)."""
        return self.runners[target.arch]

    def asset_args(self, **extra: Any) -> dict[str, Any]:
        """Keyword arguments for `dg.asset` / `dg.multi_asset` shared by every stage kind."""
        if "check_specs" in extra:
            extra["check_specs"] = [self.partitioned_check(c) for c in extra["check_specs"]]
        return dict(
            key=self.key,
            group_name=self.pipeline.name,
            description=self.stage.description,
            kinds=set(self.kind_tags),
            partitions_def=self.partitions_def,
            deps=[self.dep_key(d) for d in self.stage.deps],
            pool=self.pool,
            owners=[f"team:{self.pipeline.name}"],
            tags={"nightly/stage_kind": self.stage.kind, "nightly/seed": self.pipeline.seed},
            metadata={"runners": ", ".join(self.runner_names) or ORCHESTRATOR},
            **extra,
        )

    def partitioned_check(self, check: dg.AssetCheckSpec) -> dg.AssetCheckSpec:
        """The check evaluated per night x target, so its history names the night it judged."""
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", dg.PreviewWarning)  # partitioned checks are a preview in 1.13
            return dg.AssetCheckSpec(
                check.name,
                asset=check.asset_key,
                description=check.description,
                blocking=check.blocking,
                metadata=check.metadata,
                partitions_def=self.partitions_def,
            )


def _runner_for(catalog: Catalog, stage: Stage, arch: Arch) -> tuple[str, Runner | None]:
    name = stage.runner_for(arch)
    return (ORCHESTRATOR, None) if name is None else (name, catalog.runners[name])


@dataclass
class StageRun:
    """A stage executing for one partition: where it writes, and what it will record."""

    key: NightKey
    target: Target
    runner_name: str
    runner: Runner | None
    workdir: Path
    manifest: dict[str, Any] = field(default_factory=dict)
    artefact: str | None = None
    detail: str | None = None
    status: str = "success"  # a stage that ran but found failures (tests) records "failure"
    # Set when the stage ran to its end but the night failed here (failing tests, lint findings):
    # its results are recorded, then its step fails (not materialized), so the run fails here.
    failure: str | None = None
    checks: list[dg.AssetCheckResult] = field(default_factory=list)
    published: list[Path] = field(default_factory=list)  # files to link besides the folder's reports
    links: dict[str, str] = field(default_factory=dict)  # file name -> URL, once the stage ended
    folder_link: str = ""

    @property
    def runner_kind(self) -> str | None:
        """The kind of the runner the stage runs on; None: it names none (the orchestrator)."""
        return self.runner.kind if self.runner is not None else None

    def link_metadata(self) -> dict[str, dg.MetadataValue]:
        """Links to the stage's folder and reports, for the asset's metadata."""
        return {
            **({"artefacts": dg.MetadataValue.url(self.folder_link)} if self.folder_link else {}),
            **{f"artefact/{name}": dg.MetadataValue.url(url) for name, url in self.links.items()},
        }


def refuse_release_after_failure(spec: StageSpec, warehouse: WarehouseResource, key: NightKey) -> None:
    """A release stage publishes only a night whose upstream stages all succeeded. Within a run,
    blocking checks and failed steps stop it; but a run may select the release alone (from its
    asset's page, or a backfill of its missing partitions) for a night whose suites failed while
    an earlier run materialized them: the warehouse's stage rows of the night decide then."""
    upstream = set(spec.upstream())
    bad = [
        f"{r.stage} ({r.status})"
        for r in warehouse.store().stages(key)
        if r.stage in upstream and r.status != "success"
    ]
    if bad:
        raise StageNotAvailable(
            f"{spec.key.to_user_string()}: {key} is not released: upstream stages did not succeed: "
            f"{', '.join(bad)}; re-run the night's failed stages first"
        )


def recorded_devices(run: StageRun) -> DeviceFacts | None:
    """What the stage's work ran on, as its backend recorded it (None: the backend records none)."""
    facts = run.manifest.get("devices")
    return DeviceFacts.model_validate(facts) if facts is not None else None


def stage_events(
    run: StageRun, metadata: Mapping[str, object]
) -> Iterator[dg.MaterializeResult | dg.AssetCheckResult]:
    """The asset's events: its materialization with its checks or, when the night failed at this
    stage, its checks and then a failed step carrying the metadata, with no materialization.

    A failed stage is never materialized: its partition is Failed in every view (the partitions
    bar, the asset's badge, lineage, the backfill page), and "backfill failed and missing" picks
    it. The evidence stays one click away: the step failure's metadata (`verdict`, counts, the
    failing tests with their messages, the artefact links) is what the failed partition's "Run …
    failed" link opens, the blocking check's evaluation says why, and the night's summary (written
    for every night that ran) holds the failures table with links.
    """
    full = {**metadata, **run.link_metadata()}
    if run.failure is None:
        yield dg.MaterializeResult(metadata=full, check_results=run.checks)  # type: ignore[arg-type]
        return
    yield from run.checks
    full = {"verdict": f"FAILED: {failure_headline(run.failure)}", **full}
    raise dg.Failure(description=run.failure, metadata=full)  # type: ignore[arg-type]


def innermost_cause(exc: BaseException) -> str:
    """What a stage's failure row says: the error the stage (or a resource) raised, as "Type:
    message", not Dagster's wrapper around it and without a stack trace Dagster may have laid out
    in its message (the run's logs keep the whole chain)."""
    while exc.__cause__ is not None and type(exc).__name__ in DAGSTER_WRAPPERS:
        exc = exc.__cause__
    return f"{type(exc).__name__}: {without_trace(str(exc))}"


def failure_headline(failure: str) -> str:
    """The first line of a stage's failure ("11 passed, 1 failed of 12"), without its list."""
    first = next((line.strip() for line in failure.splitlines() if line.strip()), "failed")
    return first.removesuffix(":")


@contextlib.contextmanager
def recorded_stage(
    context: dg.AssetExecutionContext,
    spec: StageSpec,
    artefacts: ArtefactStoreResource,
    warehouse: WarehouseResource,
) -> Iterator[StageRun]:
    """Run a stage body: fresh work folder, warehouse row for running/success/failure, manifest.

    An earlier run's attempt of the stage is set aside first (`.runs/<its run>/<stage>/`), never
    deleted. When this attempt ends with results of its own (a success, or failing tests), it
    replaces the earlier one, which keeps its reports and logs. When it ends without (an error,
    an interrupt), the earlier attempt's folder is put back where the night's other stages point
    to it, and this attempt's goes under `.runs/` with its logs: a re-run adds to the night's
    record, it never erases the earlier evidence."""
    key = night_key(spec.pipeline.name, context.partition_key)
    target = spec.targets[split_cell(key.target)[0]]  # a slot's cell (`cpu@06`) runs its target
    runner_name, runner = spec.runner(target)
    store = warehouse.store()
    # Another run of this night ends before this one touches it.
    hold_night(context, store, key, pooled=spec.pool is not None)
    stage = spec.stage.name
    run_id = context.run.run_id
    follows = context.run.tags.get(SUMMARY_OF_TAG, "")
    # Whose attempt the folder holds: its manifest says (the stage's row may be a later attempt's
    # that ended without results and put this one back).
    owner = artefacts.folder_run_id(key, stage)
    if owner is None:
        earlier = next((r for r in store.stages(key) if r.stage == stage), None)
        owner = earlier.run_id if earlier else ""
    aside = artefacts.set_aside(key, stage, owner)
    run = StageRun(
        key=key,
        target=target,
        runner_name=runner_name,
        runner=runner,
        workdir=artefacts.stage_dir(key, stage, fresh=True),
    )
    started = time.monotonic()
    try:
        # Inside: a warehouse that cannot take even this row puts the earlier attempt back too.
        store.record_stage(key, stage, status="running", runner=runner_name, duration_s=0.0, run_id=run_id)
        yield run
    except BaseException as exc:
        interrupted = isinstance(exc, KeyboardInterrupt | dg.DagsterExecutionInterruptedError)
        why = "interrupted: the run was cancelled" if interrupted else innermost_cause(exc)
        folder = str(run.workdir)
        if aside is not None:  # no results of its own: the earlier attempt stays the stage's
            moved = artefacts.put_back(key, stage, aside, run_id)
            folder = str(moved)
            if not interrupted:  # an interrupt ends the stage now, not after an upload
                folder = _publish_aside(context, artefacts, moved)
        elif not interrupted:
            _publish(context, artefacts, run, stage)
            folder = run.folder_link or folder
        store.record_stage(
            key,
            stage,
            status="cancelled" if interrupted else "failure",
            runner=runner_name,
            duration_s=time.monotonic() - started,
            run_id=run_id,
            artefact=folder,
            detail=why[:4000],
            follows=follows,
        )
        raise
    duration = time.monotonic() - started
    run.manifest.setdefault("runner", runner_name)
    run.manifest["run_id"] = run_id
    run.manifest["duration_s"] = round(duration, 3)
    if run.failure is None:  # a failed blocking check fails its stage, after the results are kept
        failed = [c for c in run.checks if not c.passed and c.severity == dg.AssetCheckSeverity.ERROR]
        if failed:
            run.failure = "; ".join(
                f"{c.check_name} failed: {c.description or 'no description'}" for c in failed
            )
    if run.failure is not None:
        run.status = "failure"
        run.manifest["failure"] = run.failure
    artefacts.write_manifest(key, stage, run.manifest)
    _publish(context, artefacts, run, stage)
    store.record_checks(key, stage, [_outcome(stage, c) for c in run.checks], run_id=run_id)
    store.record_stage(
        key,
        stage,
        status=run.status,
        runner=runner_name,
        duration_s=duration,
        run_id=run_id,
        artefact=_product(artefacts, run),
        detail=run.detail,
        follows=follows,
    )
    if aside is not None:  # replaced: the earlier attempt keeps its evidence
        artefacts.keep_evidence_only(aside)
        link = _publish_aside(context, artefacts, aside)
        if owner:
            store.move_stage_artefact(key, stage, owner, link)


def _publish_aside(context: dg.AssetExecutionContext, artefacts: ArtefactStoreResource, aside: Path) -> str:
    """The link to a set-aside attempt's folder; where the store cannot publish it, its path."""
    try:
        return artefacts.publish_aside(aside)
    except Exception as exc:  # ArtefactError, or anything a store's client raises
        context.log.warning(f"the reports kept in {aside} were not published: {exc}")
        return str(aside)


def _publish(
    context: dg.AssetExecutionContext, artefacts: ArtefactStoreResource, run: StageRun, stage: str
) -> None:
    """Links to the stage's reports; a store that cannot take them is logged, never fatal: the
    night's results stand and the files stay in the stage's folder."""
    try:
        run.links = artefacts.publish(run.key, stage, artefacts.reports(run.key, stage, run.published))
        run.folder_link = artefacts.folder_url(run.key, stage)
    except Exception as exc:  # ArtefactError, or anything a store's client raises
        context.log.warning(f"{run.key} {stage}: reports not published, they stay in {run.workdir}: {exc}")


def _product(artefacts: ArtefactStoreResource, run: StageRun) -> str:
    """What the stage made, as the summary links it: a file of its folder as its URL, anything
    else (an image reference, a release path) as is, else the folder's link."""
    if run.artefact is None:
        return run.folder_link or str(run.workdir)
    path = Path(run.artefact)
    if path.is_absolute() and path.exists() and path.resolve().is_relative_to(run.workdir.resolve()):
        return artefacts.file_url(path)
    return run.artefact


def _outcome(stage: str, result: dg.AssetCheckResult) -> CheckOutcome:
    severity: Literal["ERROR", "WARN"] = "WARN" if result.severity == dg.AssetCheckSeverity.WARN else "ERROR"
    return CheckOutcome(stage, result.check_name or "", severity, result.passed, result.description or "")
