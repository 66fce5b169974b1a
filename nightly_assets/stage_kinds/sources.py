"""The sources stage: every repository at its commit at the end of the night, patched."""

import dagster as dg

from nightly_assets.artefacts.resources import ArtefactStoreResource
from nightly_assets.partitions import night_end
from nightly_assets.sources.resources import GitSourcesResource
from nightly_assets.stage_kinds.spec import ORCHESTRATOR, NoParams, StageKind
from nightly_assets.stages import StageSpec, recorded_stage
from nightly_assets.warehouse.resources import WarehouseResource


def build_sources_asset(spec: StageSpec) -> dg.AssetsDefinition:
    @dg.asset(**spec.asset_args())
    def _sources(
        context: dg.AssetExecutionContext,
        git: GitSourcesResource,
        artefacts: ArtefactStoreResource,
        warehouse: WarehouseResource,
    ) -> dg.MaterializeResult:
        """Pinned checkouts of the pipeline's repositories for one night."""
        with recorded_stage(context, spec, artefacts, warehouse) as run:
            store = warehouse.store()
            earlier = store.night(run.key)
            if earlier is not None and earlier.status == "running" and earlier.run_id != context.run.run_id:
                context.log.warning(
                    f"{run.key} was still 'running' from run {earlier.run_id}; this run takes it over"
                )
            recorded = earlier.pins if earlier else {}
            repos: dict[str, dict[str, str]] = {}
            for repo in spec.pipeline.repositories:
                ref = run.target.repo_refs.get(repo.name, repo.ref)
                pin = git.pin(repo.name, repo.url, repo.branch, night_end(run.key), ref)
                if recorded.get(repo.name) and recorded[repo.name] != pin.sha:
                    # What the night tested before wins over today's view of history (force-pushes).
                    context.log.warning(
                        f"{repo.name}: branch history changed; keeping the night's recorded pin "
                        f"{recorded[repo.name][:12]} instead of {pin.sha[:12]}"
                    )
                    pin = git.describe(repo.name, repo.url, recorded[repo.name])
                checkout = git.checkout(repo.name, pin.sha, run.workdir / repo.name)
                for patch in repo.patches:
                    git.apply_patch(checkout, spec.catalog_dir / patch)
                repos[repo.name] = {
                    "url": repo.url,
                    "branch": ref or repo.branch,
                    "sha": pin.sha,
                    "committed_at": pin.committed_at,
                    "subject": pin.subject,
                    "path": str(checkout),
                    "patches": ", ".join(repo.patches),
                }
                context.log.info(f"{repo.name}: {pin.sha[:12]} ({pin.committed_at}) {pin.subject}")
            store.record_night(
                run.key,
                run_id=context.run.run_id,
                status="running",
                pins={name: r["sha"] for name, r in repos.items()},
            )
            run.manifest["repos"] = repos
            run.manifest["pinned_at"] = night_end(run.key).isoformat()  # a slot's hour, or the night's end
            run.detail = ", ".join(f"{n}@{r['sha'][:10]}" for n, r in repos.items())
        return dg.MaterializeResult(
            metadata={
                **{f"commit/{name}": r["sha"] for name, r in repos.items()},
                "pins": dg.MetadataValue.md(
                    "| repository | commit | committed | subject | patches |\n|---|---|---|---|---|\n"
                    + "\n".join(
                        f"| {n} | `{r['sha'][:12]}` | {r['committed_at']} | {r['subject']} | "
                        f"{r['patches'] or 'none'} |"
                        for n, r in repos.items()
                    )
                ),
                "night_end": night_end(run.key).isoformat(),
            }
        )

    return _sources


KIND = StageKind(
    "sources", NoParams, build_sources_asset, frozenset({"git"}), frozenset({ORCHESTRATOR, "local"})
)
