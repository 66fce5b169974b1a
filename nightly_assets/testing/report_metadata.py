"""A test report as Dagster asset metadata: its counts, and its first failing tests as Markdown and
as a table that the UI renders."""

from __future__ import annotations

from collections.abc import Sequence

import dagster as dg

from nightly_assets.results import TestCase, TestReport

MAX_FAILURE_ROWS = 50
MAX_ROW_MESSAGE_CHARS = 200


def report_metadata(report: TestReport) -> dict[str, object]:
    """The report as Dagster asset metadata: counts, and the failing tests as Markdown and a table
    that the UI renders."""
    counts = report.counts()
    ran = report.total - counts["skipped"] - counts["collected"]
    return {
        **counts,
        "duration_s": report.duration_s,
        "runner": report.runner,
        "collect_only": report.collect_only,
        "pass_rate": counts["passed"] / ran if ran else 1.0,
        "flaky": len(report.flaky),
        "failures": dg.MetadataValue.md(failures_markdown(report.failures)),
        "failed_tests": dg.MetadataValue.table(
            records=[
                dg.TableRecord({"test": c.node_id, "outcome": c.outcome, "message": _one_line(c.message)})
                for c in report.failures[:MAX_FAILURE_ROWS]
            ],
            schema=_FAILED_TESTS_SCHEMA,
        ),
    }


_FAILED_TESTS_SCHEMA = dg.TableSchema(
    columns=[
        dg.TableColumn("test", "string", description="node id (classname::name)"),
        dg.TableColumn("outcome", "string", description="failed or error"),
        dg.TableColumn("message", "string", description="the failure message, first characters"),
    ]
)


def _one_line(message: str | None) -> str:
    return " ".join((message or "").split())[:MAX_ROW_MESSAGE_CHARS]


def failures_markdown(failures: Sequence[TestCase]) -> str:
    """The first failing tests as a Markdown table (test, outcome, message)."""
    if not failures:
        return "none"
    rows = ["| test | outcome | message |", "| --- | --- | --- |"]
    for case in failures[:MAX_FAILURE_ROWS]:
        message = _one_line(case.message)
        rows.append(f"| {_md_cell(case.node_id)} | {case.outcome} | {_md_cell(message)} |")
    if len(failures) > MAX_FAILURE_ROWS:
        rows.append(f"\n… and {len(failures) - MAX_FAILURE_ROWS} more")
    return "\n".join(rows)


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|")
