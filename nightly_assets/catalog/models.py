"""Typed catalog: what a pipeline YAML document may say, and the cross-references it must keep.

A pipeline's parts have their own modules: runner.py (runners.yaml's entries), suite.py (a test
suite's `suite:` block), bazel.py (Bazel targets and builds), fields.py (shared field types) and
errors.py (how a bad field is reported). They are named here too, where the catalog's users look.
"""

from __future__ import annotations

import datetime as dt
import re
from typing import Annotated, Any

from pydantic import (
    Field,
    PrivateAttr,
    StringConstraints,
    ValidationError,
    field_validator,
    model_validator,
)

from nightly_assets.catalog.bazel import BazelBootstrap, BazelBuild, BazelTests
from nightly_assets.catalog.cadence import CadenceError, cell_name, cron_hours, split_cell
from nightly_assets.catalog.errors import error_parts, params_error
from nightly_assets.catalog.fields import Arch, Cron, RunnerRef, StrictModel, TargetName
from nightly_assets.catalog.kinds import (
    ORCHESTRATOR,
    SHARDED_RUNNER_KINDS,
    Identifier,
    StageParams,
    kind_rules,
    registered_kinds,
)
from nightly_assets.catalog.runner import Runner
from nightly_assets.catalog.suite import Confirm, Suite
from nightly_assets.tpu.models import TpuTarget

__all__ = [  # the parts' models, for the modules that import them from here
    "SAMPLE_URL",
    "Arch",
    "BazelBootstrap",
    "BazelBuild",
    "BazelTests",
    "Catalog",
    "Confirm",
    "GitHub",
    "Pipeline",
    "Repository",
    "Runner",
    "RunnerRef",
    "Stage",
    "StrictModel",
    "Suite",
    "Target",
    "Thresholds",
    "error_parts",
]


SAMPLE_URL = re.compile(r"sample:[A-Za-z0-9][A-Za-z0-9._-]*")


class Repository(StrictModel):
    name: Identifier
    url: str = Field(min_length=1)
    branch: str = "main"
    ref: str | None = None  # a fixed tag or commit instead of the night's pin
    patches: list[str] = Field(default_factory=list)  # paths relative to the catalog folder

    @field_validator("url")
    @classmethod
    def _sample_is_a_name(cls, url: str) -> str:
        # A sample repository is made under NIGHTLY_HOME: a path there would write elsewhere.
        if url.startswith("sample:") and not SAMPLE_URL.fullmatch(url):
            raise ValueError("expected sample:<name>, a plain name (letters, digits, . _ -)")
        return url


class Target(StrictModel):
    """One value of the `target` partition dimension: a cell of the pipeline's matrix."""

    name: TargetName
    arch: Arch = "amd64"
    params: dict[str, str | int | float | bool] = Field(default_factory=dict)
    build_args: dict[str, str] = Field(default_factory=dict)
    repo_refs: dict[str, str] = Field(default_factory=dict)  # repo name -> fixed ref
    devices: int = Field(default=0, ge=0)  # accelerators the target's tests expect


class Stage(StrictModel):
    name: Identifier
    kind: str  # a module of nightly_assets/stage_kinds
    description: str = Field(min_length=1, max_length=200)
    deps: list[Identifier] = Field(default_factory=list)
    runner: RunnerRef | None = None
    suite: Suite | None = None
    params: dict[str, Any] = Field(default_factory=dict)
    _typed_params: StageParams | None = PrivateAttr(default=None)

    @field_validator("kind")
    @classmethod
    def _known_kind(cls, kind: str) -> str:
        if kind not in registered_kinds():
            raise ValueError(f"expected one of {', '.join(registered_kinds())}")
        return kind

    @model_validator(mode="after")
    def _suite_matches_kind(self) -> Stage:
        if self.kind == "test_suite" and self.suite is None:
            raise ValueError("a 'test_suite' stage needs a 'suite' block")
        if self.kind != "test_suite" and self.suite is not None:
            raise ValueError(f"only 'test_suite' stages take a 'suite' block, not '{self.kind}'")
        return self

    @model_validator(mode="after")
    def _params_of_kind(self) -> Stage:
        """Validate `params` with the kind's model, naming every bad field by its place."""
        try:
            self._typed_params = kind_rules(self.kind).params.model_validate(self.params)
        except ValidationError as exc:
            raise ValueError("; ".join(params_error(e) for e in exc.errors(include_url=False))) from None
        return self

    @property
    def typed_params(self) -> StageParams:
        """`params` as the stage kind's model (validated when the catalog loaded)."""
        assert self._typed_params is not None
        return self._typed_params

    def accepted_runners(self) -> frozenset[str]:
        """The runner kinds this stage can run on (ORCHESTRATOR: it may name none)."""
        return kind_rules(self.kind).accepted_runners(self.typed_params)

    @property
    def runner_ref(self) -> RunnerRef | None:
        return self.suite.runner if self.suite else self.runner

    def runner_names(self) -> list[str]:
        ref = self.runner_ref
        if ref is None:
            return []
        return [ref] if isinstance(ref, str) else list(ref.values())

    def runner_for(self, arch: Arch) -> str | None:
        """The runner this stage uses for a target of `arch` (None: the orchestrator itself)."""
        ref = self.runner_ref
        if ref is None or isinstance(ref, str):
            return ref
        if arch not in ref:
            raise KeyError(f"stage '{self.name}' names no runner for arch '{arch}'")
        return ref[arch]


class Thresholds(StrictModel):
    test_count_drop_pct: float = Field(default=1.0, ge=0)
    # perf_baseline's change-point detector (perf/changepoint.py): the least relative change
    # that alerts, and the nights a benchmark needs before any verdict.
    regression_min_change: float = Field(default=0.03, gt=0, lt=1)
    regression_min_history: int = Field(default=7, ge=3)
    flaky_share_max: float = Field(default=0.05, ge=0, le=1)
    in_scope_share_min: float | None = Field(default=None, ge=0, le=1)
    # Opt-in: a flaky test's failures stop failing tests_passed (still counted and listed) until
    # it has had this many clean nights in a row.
    quarantine_clean_nights: int | None = Field(default=None, ge=1)
    cost_budget_usd: float | None = Field(default=None, gt=0)
    # A night's summary is due this long after the schedule's tick; later, the night is missing.
    summary_deadline_hours: int = Field(default=12, ge=1, le=24)

    @model_validator(mode="before")
    @classmethod
    def _replaced(cls, data: Any) -> Any:
        if isinstance(data, dict) and {"benchmark_slowdown", "baseline_nights"} & data.keys():
            raise ValueError(
                "benchmark_slowdown and baseline_nights were replaced by change-point detection: "
                "set regression_min_change (default 0.03) and regression_min_history (default 7 nights)"
            )
        return data


class GitHub(StrictModel):
    """Where a pipeline reports on GitHub: the PR tier's label, and an issue when a night fails."""

    repo: Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$")]
    pr_label: str | None = Field(default=None, min_length=1, max_length=50)  # starts the PR tier
    pr_stage: Identifier | None = None  # the test_suite stage the PR tier runs; default the first
    allow: list[str] = Field(default_factory=list)  # logins that may start it without write access
    issue_on_failure: bool = True
    issue_labels: list[str] = Field(default_factory=lambda: ["ci-failure"])
    status_context: str | None = None  # the commit status' name; default nightly/<pipeline>


class Pipeline(StrictModel):
    name: Identifier
    title: str = Field(min_length=1)
    seed: str
    description: str = Field(min_length=1)
    cron: Cron
    start_date: dt.date
    retention_days: int = Field(default=7, ge=1)
    notify_channel: str = "#nightly"
    repositories: list[Repository] = Field(min_length=1)
    targets: list[Target] = Field(min_length=1)
    stages: list[Stage] = Field(min_length=1)
    thresholds: Thresholds = Field(default_factory=Thresholds)
    github: GitHub | None = None
    # The results site and its JSON may be read by anyone (seed 002: results open to the PyTorch
    # community): published only with public artefact links, secrets and private hosts redacted.
    public: bool = False
    # Who gets each night's report by mail (the summary, its PDF reports attached; seed 004).
    mail: list[Annotated[str, Field(pattern=r"^[^@\s]+@[^@\s]+\.[^@\s]+$")]] = Field(default_factory=list)

    @model_validator(mode="after")
    def _references(self) -> Pipeline:
        _unique("targets", [t.name for t in self.targets])
        _unique("stages", [s.name for s in self.stages])
        _unique("repositories", [r.name for r in self.repositories])
        names = {s.name for s in self.stages}
        repos = {r.name for r in self.repositories}
        for stage in self.stages:
            for dep in stage.deps:
                if dep not in names:
                    raise ValueError(f"stage '{stage.name}' depends on unknown stage '{dep}'")
        for target in self.targets:
            for repo in target.repo_refs:
                if repo not in repos:
                    raise ValueError(f"target '{target.name}' pins unknown repository '{repo}'")
        for kind in ("sources", "night_summary"):
            if sum(s.kind == kind for s in self.stages) != 1:
                raise ValueError(f"a pipeline has exactly one '{kind}' stage")
        _check_acyclic(self.stages)
        for stage in self.stages:
            for ref in stage.typed_params.stage_refs():
                if ref not in self.upstream(stage.name):
                    raise ValueError(f"stage '{stage.name}' reads stage '{ref}', which is not upstream of it")
            for repo in stage.typed_params.repositories():
                if repo not in repos:
                    raise ValueError(f"stage '{stage.name}' builds from unknown repository {repo!r}")
        if self.github is not None and self.github.pr_label is not None:
            self.pr_stage()  # named and a test suite
        self.summary_deadline_cron()  # a cron the summary's freshness policy can take
        return self

    @property
    def slot_hours(self) -> tuple[int, ...]:
        """The UTC hours its runs start at: one for a nightly pipeline, several for run slots."""
        try:
            return cron_hours(self.cron)
        except CadenceError as exc:
            raise ValueError(str(exc)) from None

    @property
    def slotted(self) -> bool:
        """It runs several times a day: its partitions are slots (`<target>@<HH>` cells)."""
        return len(self.slot_hours) > 1

    def cells(self, hour: int | None = None) -> list[str]:
        """The partition dimension's target values: each target, or each target at each slot hour
        (only `hour`'s where given)."""
        if not self.slotted:
            return [t.name for t in self.targets]
        hours = self.slot_hours if hour is None else (hour,)
        return [cell_name(t.name, h) for h in hours for t in self.targets]

    @property
    def summary_deadline_hours(self) -> int:
        """How long after its tick a run's summary is due: `thresholds.summary_deadline_hours`, of a
        pipeline of run slots at most the shortest gap between slots (its default): a slot is due
        before the next one starts, and Dagster's freshness policy takes no longer window."""
        declared = self.thresholds.summary_deadline_hours
        if not self.slotted:
            return declared
        hours = self.slot_hours
        gap = min(b - a for a, b in zip(hours, [*hours[1:], hours[0] + 24], strict=True))
        if "summary_deadline_hours" not in self.thresholds.model_fields_set:
            return min(declared, gap)
        if declared > gap:
            raise ValueError(
                f"thresholds.summary_deadline_hours: {declared} h is past the next run slot of cron "
                f"{self.cron!r} ({gap} h apart); expected at most {gap}"
            )
        return declared

    def summary_deadline_cron(self) -> str:
        """When a run's summary is due: the schedule's cron, `summary_deadline_hours` later (each
        run at a fixed minute and hour)."""
        minute, _, *days = self.cron.split()
        later = [h + self.summary_deadline_hours for h in self.slot_hours]
        if any(h >= 24 for h in later) and days != ["*", "*", "*"]:
            raise ValueError(
                "thresholds.summary_deadline_hours: a summary due past midnight needs a cron that runs "
                f"every day, got {self.cron!r}"
            )
        return " ".join([minute, ",".join(str(h % 24) for h in sorted({h % 24 for h in later})), *days])

    def pr_stage(self) -> Stage:
        """The test_suite stage the PR tier runs (github.pr_stage, else the first test suite)."""
        assert self.github is not None
        suites = self.stages_of("test_suite")
        wanted = self.github.pr_stage
        stage = next((s for s in suites if s.name == wanted), None) if wanted else next(iter(suites), None)
        if stage is None:
            names = ", ".join(s.name for s in suites) or "none"
            raise ValueError(
                f"github.pr_stage: expected one of the test_suite stages ({names}), got {wanted!r}"
            )
        return stage

    def stage(self, name: str) -> Stage:
        return next(s for s in self.stages if s.name == name)

    def repo_of(self, stage: Stage) -> str:
        """The repository a stage works on: its `params.repo`, else the pipeline's first."""
        return getattr(stage.typed_params, "repo", None) or self.repositories[0].name

    def upstream(self, stage: str) -> list[str]:
        """Every stage upstream of `stage`, nearest first (breadth first)."""
        frontier = list(self.stage(stage).deps)
        seen: list[str] = []
        while frontier:
            name = frontier.pop(0)
            if name not in seen:
                seen.append(name)
                frontier.extend(self.stage(name).deps)
        return seen

    def target(self, name: str) -> Target:
        """The target of `name`, a target's name or a slot's cell (`cpu@06`)."""
        base, _ = split_cell(name)
        return next(t for t in self.targets if t.name == base)

    def stages_of(self, kind: str) -> list[Stage]:
        return [s for s in self.stages if s.kind == kind]


class Catalog(StrictModel):
    pools: dict[str, Annotated[int, Field(ge=1)]]
    runners: dict[str, Runner]
    pipelines: dict[str, Pipeline]

    @model_validator(mode="after")
    def _runners_exist(self) -> Catalog:
        for name, spec in self.runners.items():
            if spec.pool is not None and spec.pool not in self.pools:
                raise ValueError(f"runner '{name}' holds pool '{spec.pool}', which 'pools' does not limit")
        for pipeline in self.pipelines.values():
            arches = {t.arch for t in pipeline.targets}
            for stage in pipeline.stages:
                for runner in stage.runner_names():
                    if runner not in self.runners:
                        known = ", ".join(sorted(self.runners))
                        raise ValueError(
                            f"pipeline '{pipeline.name}' stage '{stage.name}' uses unknown runner "
                            f"'{runner}' (runners.yaml defines: {known})"
                        )
                _check_runner_kinds(pipeline, stage, self.runners)
                ref = stage.runner_ref
                if isinstance(ref, dict) and not arches <= set(ref):
                    missing = ", ".join(sorted(arches - set(ref)))
                    raise ValueError(
                        f"pipeline '{pipeline.name}' stage '{stage.name}' names no runner for "
                        f"target arch {missing}"
                    )
            _check_tpu_targets(pipeline, self.runners)
        return self

    def runner_kinds(self, stage: Stage) -> set[str]:
        """Where the stage's work runs: the kinds of the runners it names (empty: the orchestrator)."""
        return {self.runners[r].kind for r in stage.runner_names()}

    def pool_of(self, stage: Stage) -> str | None:
        """The Dagster pool the stage's runners hold, if any."""
        return next((p for p in (self.runners[r].pool for r in stage.runner_names()) if p), None)


def _check_tpu_targets(pipeline: Pipeline, runners: dict[str, Runner]) -> None:
    """A pipeline with a TPU VM stage: every target says what VM to make (zone, type, runtime)."""
    if not any(runners[r].kind == "tpu_vm" for s in pipeline.stages for r in s.runner_names()):
        return
    for target in pipeline.targets:
        try:
            TpuTarget.from_params(target.params, target.name)
        except ValueError as exc:
            raise ValueError(f"pipeline '{pipeline.name}' {exc}") from None


def _check_runner_kinds(pipeline: Pipeline, stage: Stage, runners: dict[str, Runner]) -> None:
    """A stage names only runners of kinds its kind (and params) can run on."""
    accepted = stage.accepted_runners()
    kinds = ", ".join(sorted(accepted - {ORCHESTRATOR})) or "none: it runs in the orchestrator"
    where = f"pipeline '{pipeline.name}' stage '{stage.name}'"
    if not stage.runner_names() and ORCHESTRATOR not in accepted and "local" not in accepted:
        raise ValueError(f"{where} ({stage.kind}) names no runner; expected one of kind {kinds}")
    for name in stage.runner_names():
        if stage.suite and stage.suite.bazel and runners[name].kind == "tpu_vm":
            raise ValueError(f"{where}: a Bazel suite runs through Bazel, not on '{name}' (tpu_vm)")
        if runners[name].kind not in accepted:
            raise ValueError(
                f"{where} ({stage.kind}) cannot run on '{name}' ({runners[name].kind}); "
                f"expected a runner of kind {kinds}"
            )
        if stage.suite and stage.suite.sharded and runners[name].kind not in SHARDED_RUNNER_KINDS:
            raise ValueError(
                f"{where}: suite.shards runs on runners of kind {', '.join(sorted(SHARDED_RUNNER_KINDS))}, "
                f"not on '{name}' ({runners[name].kind}); leave 'shards' and 'shard_minutes' out there"
            )


def _unique(what: str, names: list[str]) -> None:
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise ValueError(f"{what}: '{name}' appears twice")
        seen.add(name)


def _check_acyclic(stages: list[Stage]) -> None:
    deps = {s.name: set(s.deps) for s in stages}
    done: set[str] = set()
    while len(done) < len(deps):
        ready = [n for n, d in deps.items() if n not in done and d <= done]
        if not ready:
            cycle = sorted(set(deps) - done)
            raise ValueError(f"stage dependencies form a cycle among: {', '.join(cycle)}")
        done.update(ready)
