"""The culprit search's check: WARN, failing when a first bad commit is named, so the commit, its
author and its subject reach the alerts (a search that names none passes, saying why)."""

from __future__ import annotations

import dagster as dg

from nightly_assets.warehouse.rows import Culprit

FIRST_BAD_COMMIT = "first_bad_commit"


def culprit_check_specs(key: dg.AssetKey) -> list[dg.AssetCheckSpec]:
    return [
        dg.AssetCheckSpec(
            FIRST_BAD_COMMIT,
            asset=key,
            description="Fails (WARN) naming the first bad commit of each new failure or regression found.",
        )
    ]


def culprit_line(found: Culprit) -> str:
    if found.outcome == "found" and found.commit:
        commit = f"{found.repo} {found.commit[:10]} {found.author}: {found.title}"
        return f"{found.subject}: first bad commit {commit}"
    return f"{found.subject}: {found.outcome} ({found.detail})"


def first_bad_commit(key: dg.AssetKey, culprits: list[Culprit]) -> dg.AssetCheckResult:
    named = [c for c in culprits if c.outcome == "found"]
    return dg.AssetCheckResult(
        check_name=FIRST_BAD_COMMIT,
        asset_key=key,
        passed=not named,
        severity=dg.AssetCheckSeverity.WARN,
        description="; ".join(culprit_line(c) for c in culprits) or "no new failure or regression tonight",
        metadata={"named": len(named), "searched": len(culprits)},
    )
