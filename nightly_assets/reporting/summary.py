"""Seed 001's results summary: one row per stage with status, runner, duration and artefacts."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from nightly_assets.catalog.models import Pipeline
from nightly_assets.results import NightKey
from nightly_assets.warehouse.store import MachineCost, Warehouse


@dataclass(frozen=True)
class SummaryRow:
    stage: str
    status: str
    runner: str
    duration_min: float | None
    artefact: str
    detail: str


def summary_rows(pipeline: Pipeline, key: NightKey, store: Warehouse, skip: str = "") -> list[SummaryRow]:
    """Every stage of the pipeline in catalog order; a stage with no row this night was skipped."""
    recorded = {row.stage: row for row in store.stages(key)}
    rows = []
    for stage in pipeline.stages:
        if stage.name == skip:
            continue
        row = recorded.get(stage.name)
        if row is None:
            rows.append(SummaryRow(stage.name, "skipped", "-", None, "", "did not start"))
            continue
        status = "failure" if row.status == "running" else row.status  # a crash left it running
        rows.append(
            SummaryRow(
                stage.name,
                status,
                row.runner,
                round(row.duration_s / 60, 2),
                row.artefact or "",
                row.detail or "",
            )
        )
    return rows


def night_status(rows: list[SummaryRow], failed_tests: int) -> str:
    if any(r.status == "failure" for r in rows) or failed_tests:
        return "failure"
    if any(r.status == "skipped" for r in rows):
        return "partial"
    return "success"


def summary_markdown(
    key: NightKey,
    rows: list[SummaryRow],
    suites: dict[str, dict[str, int]],
    costs: Sequence[MachineCost] = (),
) -> str:
    lines = [
        f"## {key.pipeline} — night {key.night.isoformat()} — {key.target}",
        "",
        "| Stage | Status | Runner | Duration (min) | Artifacts | Detail |",
        "|-------|--------|--------|----------------|-----------|--------|",
    ]
    for r in rows:
        duration = "-" if r.duration_min is None else f"{r.duration_min:g}"
        artefact = f"[Log & Artifacts]({r.artefact})" if r.artefact else "-"
        lines.append(f"| {r.stage} | {r.status} | {r.runner} | {duration} | {artefact} | {_cell(r.detail)} |")
    if suites:
        lines += [
            "",
            "| Suite | Total | Passed | Failed | Errors | Skipped | Collected |",
            "|-------|-------|--------|--------|--------|---------|-----------|",
        ]
        for suite, c in suites.items():
            lines.append(
                f"| {suite} | {c['total']} | {c['passed']} | {c['failed']} | {c['error']} | "
                f"{c['skipped']} | {c['collected']} |"
            )
    if costs:
        lines += [
            "",
            "| Stage | Machine | Type | Lifetime (min) | Cost (USD) | Ended |",
            "|-------|---------|------|----------------|------------|-------|",
        ]
        for cost in costs:
            lines.append(
                f"| {cost.stage} | {cost.machine.rsplit('/', 1)[-1]} | {cost.machine_type} | "
                f"{cost.lifetime_s / 60:.2f} | {cost.cost_usd:.4f} | {cost.ended} |"
            )
        lines.append(f"\nMachine cost tonight: ${sum(c.cost_usd for c in costs):.4f}")
    return "\n".join(lines) + "\n"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")[:160]
