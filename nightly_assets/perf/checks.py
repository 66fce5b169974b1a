"""The regression check: a benchmark whose level changed for the worse tonight (a change point the
detector confirmed on this night) alerts once, WARN, naming where it began and the suspect commits."""

from __future__ import annotations

from typing import Any

import dagster as dg

from nightly_assets.sources.suspects import suspect_text

NO_NEW_REGRESSION = "no_new_regression"


def regression_check_specs(key: dg.AssetKey, min_change: float) -> list[dg.AssetCheckSpec]:
    return [
        dg.AssetCheckSpec(
            NO_NEW_REGRESSION,
            asset=key,
            description=(
                f"No benchmark's level got worse by {min_change:.0%} or more from a night on "
                "(a change point confirmed tonight; alerts once per change)."
            ),
        )
    ]


def regression_lines(comparison: dict[str, dict[str, Any]]) -> list[str]:
    """A readable line per benchmark that regressed tonight: the change and its suspect commits."""
    lines = []
    for name, row in comparison.items():
        change = row.get("regression")
        if change is None:
            continue
        suspects = "; ".join(suspect_text(repo, span) for repo, span in change["commits"].items())
        lines.append(
            f"{name} {change['text']}" + (f"; suspects: {suspects}" if suspects else "; no commit changed")
        )
    return lines


def no_new_regression(key: dg.AssetKey, comparison: dict[str, dict[str, Any]]) -> dg.AssetCheckResult:
    found = regression_lines(comparison)
    states: dict[str, int] = {}
    needed: dict[str, list[str]] = {}  # "3 of 7 nights needed for a baseline" -> its benchmarks
    for name, row in comparison.items():
        state, _, why = row["state"].partition(": ")  # "new baseline: GPU ... -> ..." counts as one
        states[state] = states.get(state, 0) + 1
        if state == "insufficient data" and why:
            needed.setdefault(why, []).append(name)
    tally = ", ".join(f"{n} {state}" for state, n in sorted(states.items()))
    if needed:
        tally += " (" + "; ".join(f"{', '.join(names)}: {why}" for why, names in needed.items()) + ")"
    return dg.AssetCheckResult(
        check_name=NO_NEW_REGRESSION,
        asset_key=key,
        passed=not found,
        severity=dg.AssetCheckSeverity.WARN,
        description="; ".join(found) or f"{len(comparison)} benchmark(s): {tally}",
        metadata={"regressions": len(found), **{f"state/{s}": n for s, n in states.items()}},
    )
