"""Seed 003's rule: a benchmark more than `slowdown` x its baseline is a regression (WARN)."""

from __future__ import annotations

from typing import Any

import dagster as dg

WITHIN_BASELINE = "benchmarks_within_baseline"


def baseline_check_specs(key: dg.AssetKey, slowdown: float) -> list[dg.AssetCheckSpec]:
    return [
        dg.AssetCheckSpec(
            WITHIN_BASELINE,
            asset=key,
            description=f"No benchmark is more than {slowdown:g}x worse than its baseline.",
        )
    ]


def regressions(comparison: dict[str, dict[str, Any]], slowdown: float) -> list[str]:
    """Benchmarks worse than `slowdown` x baseline, as readable lines."""
    found = []
    for name, row in comparison.items():
        ratio = row.get("ratio")
        if ratio is None:
            continue
        worse = ratio > slowdown if row["lower_is_better"] else ratio < 1 / slowdown
        if worse:
            found.append(f"{name}: {row['value']:.4g} vs baseline {row['baseline']:.4g} ({ratio:.2f}x)")
    return found


def within_baseline(
    key: dg.AssetKey, comparison: dict[str, dict[str, Any]], slowdown: float
) -> dg.AssetCheckResult:
    found = regressions(comparison, slowdown)
    compared = sum(1 for row in comparison.values() if row.get("ratio") is not None)
    return dg.AssetCheckResult(
        check_name=WITHIN_BASELINE,
        asset_key=key,
        passed=not found,
        severity=dg.AssetCheckSeverity.WARN,
        description="; ".join(found) or f"{compared} benchmark(s) within {slowdown:g}x of baseline",
        metadata={"regressions": len(found), "compared": compared},
    )
