"""Checks on a test report: everything passed (gates release), and no suite silently shrank."""

from __future__ import annotations

import datetime as dt
from collections.abc import Set as AbstractSet

import dagster as dg

from nightly_assets.results import TestReport
from nightly_assets.testing.report_metadata import failures_markdown

TESTS_PASSED = "tests_passed"
TEST_COUNT_STABLE = "test_count_stable"


def test_report_check_specs(key: dg.AssetKey, max_drop_pct: float) -> list[dg.AssetCheckSpec]:
    return [
        dg.AssetCheckSpec(
            TESTS_PASSED,
            asset=key,
            blocking=True,
            description="Every test of the suite passed (or, collect-only, was collected); gates release.",
        ),
        dg.AssetCheckSpec(
            TEST_COUNT_STABLE,
            asset=key,
            description=f"The suite lost at most {max_drop_pct:g} % of its tests since the previous night.",
        ),
    ]


NAMED_FAILURES = 10  # failing tests named in a check, an alert or a step's error


def tests_passed(
    key: dg.AssetKey, report: TestReport, quarantined: AbstractSet[str] = frozenset(), not_run: str = ""
) -> dg.AssetCheckResult:
    """Every test passed, but the failures of `quarantined` tests (flaky, node ids): those are
    counted and listed, and do not fail the check. `not_run` says which planned tests did not run
    (a lost shard's): a test that did not run did not pass."""
    if report.collect_only:
        passed = report.total > 0
        summary = f"{report.total} tests collected (collect-only)" + ("" if passed else ": no test found")
    else:
        passed = all(c.node_id in quarantined for c in report.failures) and not not_run
        summary = failure_summary(report, quarantined=quarantined)
        if not_run:
            summary = f"{not_run}\n{summary}"
    return dg.AssetCheckResult(
        check_name=TESTS_PASSED,
        asset_key=key,
        passed=passed,
        severity=dg.AssetCheckSeverity.ERROR,
        description=summary,
        metadata={"failures": dg.MetadataValue.md(failures_markdown(report.failures))},
    )


def failure_summary(
    report: TestReport, named: int = NAMED_FAILURES, quarantined: AbstractSet[str] = frozenset()
) -> str:
    """'9 passed, 1 failed of 10' and, below it, the first `named` failing tests with their message
    (quarantined ones marked, after the others)."""
    failures = sorted(report.failures, key=lambda c: c.node_id in quarantined)
    line = f"{report.count('passed')} passed, {failed_and_errors(report)} of {report.total}"
    held = sum(c.node_id in quarantined for c in failures)
    if held:
        line += f" ({held} of them quarantined as flaky: counted, not gating)"
    if not failures:
        return line
    names = [
        f"{'[quarantined] ' if c.node_id in quarantined else ''}{c.node_id}: "
        f"{' '.join((c.message or c.outcome).split())[:240]}"
        for c in failures[:named]
    ]
    if len(failures) > named:
        names.append(f"… and {len(failures) - named} more")
    return "\n".join([line + ":", *(f"  {n}" for n in names)])


def failed_and_errors(report: TestReport) -> str:
    """ "1 failed", "14 errors", "1 failed, 2 errors": errors (a test that could not run, e.g. a
    module that failed to import) are counted as errors, as the stage's table counts them."""
    failed, errors = report.count("failed"), report.count("error")
    parts = [f"{failed} failed"] if failed or not errors else []
    if errors:
        parts.append(f"{errors} error" + ("s" if errors > 1 else ""))
    return ", ".join(parts)


def test_count_stable(
    key: dg.AssetKey, report: TestReport, previous: tuple[dt.date, int] | None, max_drop_pct: float
) -> dg.AssetCheckResult:
    if previous is None or report.collect_only:
        why = "collect-only night" if report.collect_only else "no earlier night to compare with"
        return dg.AssetCheckResult(
            check_name=TEST_COUNT_STABLE,
            asset_key=key,
            passed=True,
            severity=dg.AssetCheckSeverity.WARN,
            description=why,
            metadata={"total": report.total},
        )
    night, before = previous
    drop_pct = 100.0 * (before - report.total) / before if before else 0.0
    return dg.AssetCheckResult(
        check_name=TEST_COUNT_STABLE,
        asset_key=key,
        passed=drop_pct <= max_drop_pct,
        severity=dg.AssetCheckSeverity.WARN,
        description=f"{report.total} tests tonight, {before} on {night.isoformat()} ({-drop_pct:+.1f} %)",
        metadata={
            "total": report.total,
            "previous_total": before,
            "previous_night": night.isoformat(),
            "drop_pct": round(drop_pct, 2),
        },
    )
