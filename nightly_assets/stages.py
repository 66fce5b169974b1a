"""What every stage asset shares: its spec from the catalog, and a run recorded in the warehouse."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import dagster as dg

from nightly_assets.artefacts.resources import ArtefactStoreResource
from nightly_assets.catalog.models import Catalog, Pipeline, Runner, Stage, Target
from nightly_assets.partitions import night_key
from nightly_assets.results import NightKey
from nightly_assets.warehouse.resources import WarehouseResource

# Kinds tags shown in the UI per stage kind (Dagster shows at most three).
STAGE_KINDS: dict[str, set[str]] = {
    "sources": {"git"},
    "lint": {"python", "ruff"},
    "wheels": {"python", "wheel"},
    "environment": {"python", "venv"},
    "image_pull": {"docker"},
    "docker_image": {"docker"},
    "test_suite": {"pytest", "junit"},
    "benchmarks": {"json"},
    "benchmark_sweep": {"slurm"},
    "perf_baseline": {"sql"},
    "batch_job": {"slurm"},
    "deploy": {"file"},
    "analysis_report": {"pdf"},
    "publish_wheels": {"pypi"},
    "promote_images": {"docker"},
    "night_summary": {"markdown"},
}


@dataclass(frozen=True)
class StageSpec:
    """One stage of one pipeline, with everything its asset builder needs from the catalog."""

    catalog: Catalog
    catalog_dir: Path
    pipeline: Pipeline
    stage: Stage
    partitions_def: dg.MultiPartitionsDefinition

    @property
    def key(self) -> dg.AssetKey:
        return dg.AssetKey([self.pipeline.name, self.stage.name])

    def dep_key(self, stage: str) -> dg.AssetKey:
        return dg.AssetKey([self.pipeline.name, stage])

    def upstream(self) -> list[str]:
        """Every stage upstream of this one, nearest first (breadth first)."""
        frontier = list(self.stage.deps)
        seen: list[str] = []
        while frontier:
            name = frontier.pop(0)
            if name not in seen:
                seen.append(name)
                frontier.extend(self.pipeline.stage(name).deps)
        return seen

    def upstream_stage(self, *kinds: str) -> str | None:
        """The nearest stage upstream of this one whose kind is one of `kinds`."""
        return next((n for n in self.upstream() if self.pipeline.stage(n).kind in kinds), None)

    def pinned_repo(
        self, artefacts: ArtefactStoreResource, key: NightKey, repo: str | None = None
    ) -> dict[str, str]:
        """The sources stage's record of `repo` (default: the stage's `params.repo`, else the first):
        `path` of the night's checkout, `sha`, `url`, `branch`..."""
        sources = self.pipeline.stages_of("sources")[0].name
        repo = repo or self.repo_name
        entry: dict[str, str] = artefacts.read_manifest(key, sources)["repos"][repo]
        return entry

    @property
    def repo_name(self) -> str:
        """The repository the stage works on: `params.repo`, else the pipeline's first."""
        return str(self.stage.params.get("repo", self.pipeline.repositories[0].name))

    def output_key(self, key: NightKey) -> str:
        """Where this stage's Bazel builds of its repository for `key`'s target persist across
        nights (stages of one night on the same repository share it)."""
        return f"{key.pipeline}.{key.target}.{self.repo_name}"

    def checkout(self, artefacts: ArtefactStoreResource, key: NightKey) -> Path:
        """The night's pinned checkout of the stage's repository."""
        return Path(self.pinned_repo(artefacts, key)["path"])

    @property
    def pool(self) -> str | None:
        return self.catalog.pool_of(self.stage)

    def runner(self, target: Target) -> tuple[str, Runner | None]:
        name = self.stage.runner_for(target.arch)
        if name is None:
            return "orchestrator", None
        return name, self.catalog.runners[name]

    def asset_args(self, **extra: Any) -> dict[str, Any]:
        """Keyword arguments for `dg.asset` / `dg.multi_asset` shared by every stage kind."""
        kinds = set(STAGE_KINDS[self.stage.kind])
        return dict(
            key=self.key,
            group_name=self.pipeline.name,
            description=self.stage.description,
            kinds=kinds,
            partitions_def=self.partitions_def,
            deps=[self.dep_key(d) for d in self.stage.deps],
            pool=self.pool,
            owners=[f"team:{self.pipeline.name}"],
            tags={"nightly/stage_kind": self.stage.kind, "nightly/seed": self.pipeline.seed},
            metadata={"runners": ", ".join(self.stage.runner_names()) or "orchestrator"},
            **extra,
        )


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


@contextlib.contextmanager
def recorded_stage(
    context: dg.AssetExecutionContext,
    spec: StageSpec,
    artefacts: ArtefactStoreResource,
    warehouse: WarehouseResource,
) -> Iterator[StageRun]:
    """Run a stage body: fresh work folder, warehouse row for running/success/failure, manifest."""
    key = night_key(spec.pipeline.name, context.partition_key)
    target = spec.pipeline.target(key.target)
    runner_name, runner = spec.runner(target)
    run = StageRun(
        key=key,
        target=target,
        runner_name=runner_name,
        runner=runner,
        workdir=artefacts.stage_dir(key, spec.stage.name, fresh=True),
    )
    store = warehouse.store()
    store.record_stage(
        key,
        spec.stage.name,
        status="running",
        runner=runner_name,
        duration_s=0.0,
        run_id=context.run.run_id,
    )
    started = time.monotonic()
    try:
        yield run
    except BaseException as exc:
        store.record_stage(
            key,
            spec.stage.name,
            status="failure",
            runner=runner_name,
            duration_s=time.monotonic() - started,
            run_id=context.run.run_id,
            artefact=str(run.workdir),
            detail=f"{type(exc).__name__}: {exc}"[:4000],
        )
        raise
    duration = time.monotonic() - started
    run.manifest.setdefault("runner", runner_name)
    run.manifest["duration_s"] = round(duration, 3)
    artefacts.write_manifest(key, spec.stage.name, run.manifest)
    store.record_stage(
        key,
        spec.stage.name,
        status=run.status,
        runner=runner_name,
        duration_s=duration,
        run_id=context.run.run_id,
        artefact=run.artefact or str(run.workdir),
        detail=run.detail,
    )
