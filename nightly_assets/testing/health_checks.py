"""Checks on tonight's test health: torch_spyre's gates (flaky share below `flaky_share_max`,
in-scope share at least `in_scope_share_min`), the new-failure alert with its suspect commits and
the infra-event alert (a shared resource that failed part of a suite: one alert, not one a test)
and the flakier-test alert (a known-flaky test whose failure rate jumped, a burst: once, on the
night it is first seen, not a broken test at each failed streak; testing/flakiness.py)."""

from __future__ import annotations

from typing import Any

import dagster as dg

from nightly_assets.sources.suspects import SpanKey, suspect_text
from nightly_assets.testing.clusters import Cluster
from nightly_assets.testing.health import SHOWN, Judged

FLAKY_SHARE = "flaky_share_within_limit"
IN_SCOPE_SHARE = "in_scope_share_reached"
NO_NEW_BROKEN = "no_new_broken_test"
NO_INFRA_EVENT = "no_infra_event"
NO_FLAKIER = "no_flakier_test"


def health_check_specs(
    key: dg.AssetKey, flaky_share_max: float, in_scope_share_min: float | None
) -> list[dg.AssetCheckSpec]:
    specs = [
        dg.AssetCheckSpec(
            FLAKY_SHARE,
            asset=key,
            blocking=True,
            description=f"Fewer than {flaky_share_max:.0%} of tonight's tests are flaky; gates release.",
        ),
        dg.AssetCheckSpec(
            NO_NEW_BROKEN,
            asset=key,
            description="No test started failing on every attempt tonight (alerts once, naming suspects).",
        ),
        dg.AssetCheckSpec(
            NO_INFRA_EVENT,
            asset=key,
            description="No shared resource (a database, a host, a GPU) failed part of a suite tonight "
            "(one alert per failure signature, naming the resource and the tests).",
        ),
        dg.AssetCheckSpec(
            NO_FLAKIER,
            asset=key,
            description="No known-flaky test started failing much more often tonight (a burst: alerts "
            "once, on the night it is first seen; its failed streaks are no broken tests while its "
            "failures still pass on re-runs).",
        ),
    ]
    if in_scope_share_min is not None:
        specs.append(
            dg.AssetCheckSpec(
                IN_SCOPE_SHARE,
                asset=key,
                blocking=True,
                description=f"At least {in_scope_share_min:.0%} of the in-scope tests ran; gates release.",
            )
        )
    return specs


def flaky_share(key: dg.AssetKey, flaky: list[Judged], ran: int, limit: float) -> dg.AssetCheckResult:
    value = len(flaky) / ran if ran else 0.0
    named = ", ".join(f"{j.suite}::{j.test_id}" for j in flaky[:SHOWN])
    return dg.AssetCheckResult(
        check_name=FLAKY_SHARE,
        asset_key=key,
        passed=value < limit,
        severity=dg.AssetCheckSeverity.ERROR,
        description=f"{len(flaky)} flaky of {ran} tests that ran ({value:.2%}, limit {limit:.0%})"
        + (f": {named}" if named else ""),
        metadata={"flaky": len(flaky), "ran": ran, "share": round(value, 4), "limit": limit},
    )


def in_scope_share(
    key: dg.AssetKey, suite: str, counts: dict[str, int] | None, minimum: float
) -> dg.AssetCheckResult:
    if counts is None:
        return dg.AssetCheckResult(
            check_name=IN_SCOPE_SHARE,
            asset_key=key,
            passed=False,
            severity=dg.AssetCheckSeverity.ERROR,
            description=f"the in-scope suite {suite!r} has no results tonight",
        )
    enabled = counts["passed"] + counts["failed"] + counts["error"]
    value = enabled / counts["total"] if counts["total"] else 0.0
    return dg.AssetCheckResult(
        check_name=IN_SCOPE_SHARE,
        asset_key=key,
        passed=value >= minimum,
        severity=dg.AssetCheckSeverity.ERROR,
        description=f"{enabled} of {counts['total']} in-scope tests of {suite} ran ({value:.1%}, "
        f"rollout stage needs {minimum:.0%})",
        metadata={"enabled": enabled, "in_scope": counts["total"], "share": round(value, 4)},
    )


def no_new_broken(
    key: dg.AssetKey, judged: list[Judged], spans: dict[SpanKey, dict[str, Any]]
) -> dg.AssetCheckResult:
    """`spans`: the suspect ranges of the new failures (see GitSourcesResource.suspects)."""
    new = [j for j in judged if j.new_failure]
    lines = _shown([new_failure_line(j, spans) for j in new[:SHOWN]], len(new))
    return dg.AssetCheckResult(
        check_name=NO_NEW_BROKEN,
        asset_key=key,
        passed=not new,
        severity=dg.AssetCheckSeverity.WARN,
        description="; ".join(lines) or "no test started failing tonight",
        metadata={"new_failures": len(new)},
    )


def new_failure_line(judged: Judged, spans: dict[SpanKey, dict[str, Any]]) -> str:
    verdict = judged.verdict
    since = f"last passed {verdict.last_good}" if verdict.last_good else "never passed"
    suspects = "; ".join(
        suspect_text(repo, spans[(repo, *pair)])
        for repo, pair in verdict.suspects.items()
        if (repo, *pair) in spans
    )
    return f"{judged.suite}::{judged.test_id} fails since {verdict.first_bad} ({since})" + (
        f"; suspects: {suspects}"
        if suspects
        else "; no pinned commit changed (the machine or the environment)"
    )


def no_flakier(key: dg.AssetKey, judged: list[Judged]) -> dg.AssetCheckResult:
    """One line per test newly in a burst tonight (`Judged.new_flakier`)."""
    new = [j for j in judged if j.new_flakier]
    lines = _shown([flakier_line(j) for j in new[:SHOWN]], len(new))
    return dg.AssetCheckResult(
        check_name=NO_FLAKIER,
        asset_key=key,
        passed=not new,
        severity=dg.AssetCheckSeverity.WARN,
        description="; ".join(lines) or "no known-flaky test started failing more often tonight",
        metadata={"flakier": len(new)},
    )


def flakier_line(judged: Judged) -> str:
    verdict = judged.verdict
    rates = (
        f": fails {verdict.burst_rate:.0%} of its attempts, {verdict.rate_before:.0%} before"
        if verdict.burst_rate is not None and verdict.rate_before is not None
        else ""
    )
    return (
        f"{judged.suite}::{judged.test_id} flakier since {verdict.flakier_since}{rates}"
        " (a flaky test whose failures still pass on re-runs, not broken)"
    )


def no_infra_event(key: dg.AssetKey, events: list[Cluster]) -> dg.AssetCheckResult:
    """One line per infra cluster of tonight; its tests are in no broken-test alert."""
    lines = _shown([e.line() for e in events[:SHOWN]], len(events))
    return dg.AssetCheckResult(
        check_name=NO_INFRA_EVENT,
        asset_key=key,
        passed=not events,
        severity=dg.AssetCheckSeverity.WARN,
        description="; ".join(lines) or "no shared resource failed part of a suite tonight",
        metadata={"infra_events": len(events), "tests": sum(len(e.tests) for e in events)},
    )


def _shown(lines: list[str], of: int) -> list[str]:
    """The first SHOWN of `of` lines an alert names, and how many more there are."""
    return [*lines, f"… and {of - SHOWN} more"] if of > SHOWN else lines
