"""Checks on built artefacts."""

from __future__ import annotations

from pathlib import Path

import dagster as dg

from nightly_assets.builds.wheel_metadata import wheel_problems
from nightly_assets.words import plural

WHEEL_METADATA_VALID = "wheel_metadata_valid"


def wheel_check_specs(key: dg.AssetKey) -> list[dg.AssetCheckSpec]:
    return [
        dg.AssetCheckSpec(
            WHEEL_METADATA_VALID,
            asset=key,
            blocking=True,
            description="Every wheel's METADATA names the same project and version as its file name.",
        )
    ]


def wheel_metadata_valid(key: dg.AssetKey, wheels: list[Path]) -> dg.AssetCheckResult:
    problems = [p for wheel in wheels for p in wheel_problems(wheel)]
    if not wheels:
        problems = ["no wheel was built"]
    return dg.AssetCheckResult(
        check_name=WHEEL_METADATA_VALID,
        asset_key=key,
        passed=not problems,
        severity=dg.AssetCheckSeverity.ERROR,
        description="; ".join(problems) or f"{plural(len(wheels), 'wheel')} valid",
        metadata={"wheels": len(wheels)},
    )
