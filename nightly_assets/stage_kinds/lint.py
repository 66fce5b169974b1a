"""The lint stage: ruff over the pinned checkout; findings gate like failed tests do."""

import json
import sys
from collections.abc import Iterator
from typing import Literal

import dagster as dg

from nightly_assets.artefacts.resources import ArtefactStoreResource
from nightly_assets.process import run_command
from nightly_assets.stage_kinds.spec import ORCHESTRATOR, RepoParams, StageKind
from nightly_assets.stages import StageSpec, recorded_stage, stage_events
from nightly_assets.warehouse.resources import WarehouseResource
from nightly_assets.words import plural

LINT_CLEAN = "lint_clean"


class LintParams(RepoParams):
    tool: Literal["ruff"] = "ruff"  # the linter; ruff is the one this stage knows


def build_lint_asset(spec: StageSpec) -> dg.AssetsDefinition:
    check = dg.AssetCheckSpec(
        LINT_CLEAN,
        asset=spec.key,
        blocking=True,
        description="ruff reports no finding in the pinned checkout.",
    )

    @dg.asset(**spec.asset_args(check_specs=[check]))
    def _lint(
        context: dg.AssetExecutionContext, artefacts: ArtefactStoreResource, warehouse: WarehouseResource
    ) -> Iterator[dg.MaterializeResult | dg.AssetCheckResult]:
        """ruff findings for the night's pinned checkout."""
        with recorded_stage(context, spec, artefacts, warehouse) as run:
            src = spec.checkout(artefacts, run.key)
            result = run_command(
                [sys.executable, "-m", "ruff", "check", "--output-format", "json", "--exit-zero", "."],
                cwd=src,
                timeout_s=900,
                log_path=run.workdir / "ruff.json",
            )
            findings = json.loads(result.output or "[]")
            run.manifest["findings"] = len(findings)
            run.detail = plural(len(findings), "finding")
            lines = [
                f"{f['filename']}:{f['location']['row']}: {f['code']} {f['message']}" for f in findings[:50]
            ]
            run.checks.append(
                dg.AssetCheckResult(
                    check_name=LINT_CLEAN,
                    asset_key=spec.key,
                    passed=not findings,
                    severity=dg.AssetCheckSeverity.ERROR,
                    description=run.detail,
                    metadata={"first_findings": dg.MetadataValue.text("\n".join(lines) or "none")},
                )
            )
            if findings:
                run.failure = f"{run.detail}:\n" + "\n".join(f"  {line}" for line in lines[:10])
        yield from stage_events(run, {"findings": len(findings)})

    return _lint


KIND = StageKind(
    "lint", LintParams, build_lint_asset, frozenset({"python", "ruff"}), frozenset({ORCHESTRATOR, "local"})
)
