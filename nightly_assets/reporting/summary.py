"""Seed 001's results summary: one row per stage with status, runner, duration and links, then the
devices the stages ran on (and the benchmarks that start a new baseline on them), the suites and
the pytest they ran with, the failing tests by name, the failed checks and the machine cost."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from nightly_assets.artefacts.resources import ArtefactStoreResource, MissingArtefactError
from nightly_assets.catalog.models import Pipeline
from nightly_assets.devices.facts import DeviceFacts
from nightly_assets.manifests import PerfBaselineManifest
from nightly_assets.reporting.pytest_versions import pytest_lines
from nightly_assets.results import CheckOutcome, NightKey, TestCase
from nightly_assets.testing.signatures import group_line, grouped
from nightly_assets.warehouse.rows import MachineCost, NightRun, TestVerdict
from nightly_assets.words import plural

if TYPE_CHECKING:
    from nightly_assets.warehouse.store import Warehouse

NAMED_FAILURES = 10  # failing tests named per suite
SIGNATURES_SHOWN = 5  # failure signatures per suite: a night's few shared causes, not every test
NAMED_VERDICTS = 20  # flaky and broken tests named
CELL_CHARS = 200  # a table cell's text is cut (at a word) past this; the stage's folder has it whole
RUNS_LISTED = 10  # the night's runs listed, newest first
# Worst first: the night's status is the worst that applies.
NIGHT_STATUSES = ("failure", "cancelled", "partial", "warn", "success")
_ROW_STATUS = {"failure": "failure", "cancelled": "cancelled", "skipped": "partial"}
PENDING = "pending"  # a stage after the summary that has not run yet; never judged


@dataclass(frozen=True)
class SummaryRow:
    stage: str
    status: str
    runner: str
    duration_min: float | None  # None: the stage has no row this night (it did not start)
    link: str  # the stage's folder of logs and reports
    artefact: str  # what it made: a file's URL, an image reference...
    detail: str


@dataclass(frozen=True)
class NightSummary:
    key: NightKey
    rows: list[SummaryRow]
    suites: dict[str, dict[str, int]]
    failures: dict[str, list[TestCase]]  # suite -> its first failing tests
    checks: list[CheckOutcome]  # the failed ones
    costs: Sequence[MachineCost]
    status: str
    verdicts: Sequence[TestVerdict] = ()  # the test health stage's flaky, broken and too-new tests
    # One per device configuration of the night: the stages that ran on it, and what it is.
    devices: Sequence[tuple[list[str], str]] = ()
    new_baselines: Sequence[str] = ()  # "perf_baseline: new baseline for a, b (what changed)"
    pytest_versions: Sequence[str] = ()  # "tests, tests_k (environment): pytest 8.3.5"
    runs: Sequence[NightRun] = ()  # every run of the night, newest (current) first
    suite_runs: dict[str, str] = field(default_factory=dict)  # suite -> the run that reported it
    # suite -> its failures grouped by signature (testing/signatures.py), largest first
    signatures: dict[str, list[tuple[str, list[str]]]] = field(default_factory=dict)

    @property
    def failed_tests(self) -> int:
        return _failed_tests(self.suites)

    def markdown(self) -> str:
        return summary_markdown(self)


def night_summary(
    pipeline: Pipeline,
    key: NightKey,
    store: Warehouse,
    artefacts: ArtefactStoreResource,
    *,
    skip: str = "",
    judged: set[str] | None = None,
    pending: Collection[str] = (),
) -> NightSummary:
    """The night as the warehouse has it. `judged`: the stages its status depends on (default all).
    `pending`: stages this run is still to run after the summary (shown so, not as skipped)."""
    rows = summary_rows(pipeline, key, store, artefacts, skip=skip, pending=pending)
    suites = store.suite_counts(key)
    failing = {
        suite: store.failed_cases(key, suite) for suite, c in suites.items() if c["failed"] + c["error"]
    }
    failures = {suite: cases[:NAMED_FAILURES] for suite, cases in failing.items()}
    signatures = {suite: grouped((c.node_id, c.message) for c in cases) for suite, cases in failing.items()}
    checks = [c for c in store.checks(key) if not c.passed]
    judged_rows = [r for r in rows if judged is None or r.stage in judged]
    judged_checks = [c for c in checks if judged is None or c.stage in judged]
    status = night_status(judged_rows, _failed_tests(suites), judged_checks)
    verdicts = store.verdicts(key)
    ran = {r.stage for r in rows if r.duration_min is not None}
    return NightSummary(
        key,
        rows,
        suites,
        failures,
        checks,
        store.costs(key),
        status,
        verdicts,
        devices=device_lines(pipeline, store.device_facts(key)),
        new_baselines=new_baseline_notes(pipeline, key, artefacts, ran=ran),
        pytest_versions=pytest_lines(pipeline, key, artefacts, ran=ran),
        runs=store.night_runs(key),
        suite_runs=store.suite_runs(key),
        signatures={suite: groups for suite, groups in signatures.items() if groups},
    )


def stages_after(pipeline: Pipeline, stage: str) -> list[str]:
    """The stages that depend on `stage` (directly or not), in catalog order: those after the
    summary (a release) end after it is written, and the run's follow-up writes it again."""
    return [s.name for s in pipeline.stages if stage in pipeline.upstream(s.name)]


def device_lines(pipeline: Pipeline, facts: dict[str, DeviceFacts]) -> list[tuple[list[str], str]]:
    """The night's device configurations, in the order of the first stage that ran on each: the
    stages (in catalog order; stages the catalog no longer has last) and the configuration."""
    order = {stage.name: i for i, stage in enumerate(pipeline.stages)}
    configurations: dict[str, tuple[list[str], str]] = {}
    for stage in sorted(facts, key=lambda name: (order.get(name, len(order)), name)):
        stages, _ = configurations.setdefault(facts[stage].key(), ([], facts[stage].describe()))
        stages.append(stage)
    return list(configurations.values())


def new_baseline_notes(
    pipeline: Pipeline, key: NightKey, artefacts: ArtefactStoreResource, *, ran: set[str]
) -> list[str]:
    """Each perf_baseline stage's benchmarks that start a new baseline tonight, with what changed
    (from its manifest: a stage that did not end tonight has none). `ran`: the stages this run of
    the night recorded (a manifest of a stage that did not is an earlier run's)."""
    notes = []
    for stage in pipeline.stages_of("perf_baseline"):
        if stage.name not in ran:
            continue
        try:
            manifest = artefacts.manifest(key, stage.name, PerfBaselineManifest)
        except MissingArtefactError:
            continue
        notes += [
            f"{stage.name}: new baseline for {', '.join(names)} ({change})"
            for change, names in manifest.new_baseline.items()
        ]
    return notes


def _failed_tests(suites: dict[str, dict[str, int]]) -> int:
    return sum(c["failed"] + c["error"] for c in suites.values())


def summary_rows(
    pipeline: Pipeline,
    key: NightKey,
    store: Warehouse,
    artefacts: ArtefactStoreResource,
    skip: str = "",
    pending: Collection[str] = (),
) -> list[SummaryRow]:
    """Every stage of the pipeline in catalog order; a stage with no row this night was skipped,
    but one of `pending`, which runs after the summary (its follow-up rewrites the summary)."""
    recorded = {row.stage: row for row in store.stages(key)}
    rows = []
    for stage in pipeline.stages:
        if stage.name == skip:
            continue
        row = recorded.get(stage.name)
        if row is None and stage.name in pending:
            rows.append(SummaryRow(stage.name, PENDING, "-", None, "", "", "runs after this summary"))
            continue
        if row is None:
            rows.append(SummaryRow(stage.name, "skipped", "-", None, "", "", "did not start"))
            continue
        status = "failure" if row.status == "running" else row.status  # a crash left it running
        # An attempt that ended without results keeps its own folder (under .runs/): link that one.
        link = row.artefact if row.artefact and row.artefact.endswith("/") else None
        link = link or artefacts.folder_url(key, stage.name)
        rows.append(
            SummaryRow(
                stage.name,
                status,
                row.runner,
                round(row.duration_s / 60, 2),
                link,
                "" if row.artefact in (None, link) else str(row.artefact),
                row.detail or "",
            )
        )
    return rows


def night_status(rows: Sequence[SummaryRow], failed_tests: int, failed_checks: Sequence[CheckOutcome]) -> str:
    """failure > cancelled > partial (a stage did not run) > warn (a WARN check failed) > success."""
    found = {"success"}
    for r in rows:
        found.add(_ROW_STATUS.get(r.status, "success"))
    if failed_tests or any(c.severity == "ERROR" for c in failed_checks):
        found.add("failure")
    if any(c.severity == "WARN" for c in failed_checks):
        found.add("warn")
    return next(s for s in NIGHT_STATUSES if s in found)


def summary_markdown(summary: NightSummary) -> str:
    key = summary.key
    lines = [
        f"## {key.pipeline} — night {key.night.isoformat()} — {key.target}: {summary.status}",
        "",
        "| Stage | Status | Runner | Duration (min) | Artifacts | Detail |",
        "|-------|--------|--------|----------------|-----------|--------|",
    ]
    for r in summary.rows:
        duration = "-" if r.duration_min is None else f"{r.duration_min:g}"
        links = [f"[Log & Artifacts]({r.link})"] if r.link else []
        if r.artefact.startswith(("http://", "https://")):
            links.append(f"[{r.artefact.rsplit('/', 1)[-1] or 'file'}]({r.artefact})")
        elif r.artefact:
            links.append(f"`{_cell(r.artefact)}`")
        artefacts = " ".join(links) or "-"
        lines.append(
            f"| {r.stage} | {r.status} | {r.runner} | {duration} | {artefacts} | {_cell(r.detail)} |"
        )
    if summary.devices or summary.new_baselines:
        lines += ["", "### Devices", ""]
        lines += [f"- {', '.join(stages)}: {configuration}" for stages, configuration in summary.devices]
        lines += [f"- {note}" for note in summary.new_baselines]
    if len(summary.runs) > 1:
        lines += ["", *runs_markdown(summary.runs)]
    if summary.suites:
        earlier = _earlier_reports(summary)
        lines += [
            "",
            "| Suite | Total | Passed | Failed | Errors | Skipped | Collected |"
            + (" From run |" if earlier else ""),
            "|-------|-------|--------|--------|--------|---------|-----------|"
            + ("----------|" if earlier else ""),
        ]
        for suite, c in summary.suites.items():
            lines.append(
                f"| {suite} | {c['total']} | {c['passed']} | {c['failed']} | {c['error']} | "
                f"{c['skipped']} | {c['collected']} |"
                + (f" {earlier.get(suite, 'this run')} |" if earlier else "")
            )
    if summary.pytest_versions:
        lines += ["", *(f"- {line}" for line in summary.pytest_versions)]
    if summary.signatures:
        lines += ["", "### Failures by signature", ""]
        for suite, groups in summary.signatures.items():
            lines += [f"- {suite}: {group_line(sig, tests)}" for sig, tests in groups[:SIGNATURES_SHOWN]]
            if len(groups) > SIGNATURES_SHOWN:
                lines.append(f"- {suite}: … and {len(groups) - SIGNATURES_SHOWN} more signatures")
    if summary.failures:
        lines += ["", "### Failing tests", "", "| Suite | Test | Outcome | Message |", "|---|---|---|---|"]
        for suite, cases in summary.failures.items():
            for case in cases:
                lines.append(
                    f"| {suite} | {_cell(case.node_id)} | {case.outcome} | {_cell(case.message or '')} |"
                )
            more = summary.suites[suite]["failed"] + summary.suites[suite]["error"] - len(cases)
            if more > 0:
                lines.append(f"| {suite} | … and {more} more | | |")
    if summary.verdicts:
        shown = sorted(summary.verdicts, key=lambda v: (v.state != "broken", v.state, v.suite, v.test_id))
        lines += [
            "",
            "### Flaky and broken tests",
            "",
            "| Suite | Test | Verdict | Pass rate | Why |",
            "|---|---|---|---|---|",
        ]
        for v in shown[:NAMED_VERDICTS]:
            verdict = v.state + (" (quarantined)" if v.quarantined else "")
            rate = "" if v.pass_rate is None else f"{v.pass_rate:.0%}"
            lines.append(f"| {v.suite} | {_cell(v.test_id)} | {verdict} | {rate} | {_cell(v.reason)} |")
        if len(shown) > NAMED_VERDICTS:
            lines.append(f"| … | {len(shown) - NAMED_VERDICTS} more | | | |")
    if summary.checks:
        lines += ["", "### Failed checks", "", "| Stage | Check | Severity | Why |", "|---|---|---|---|"]
        for check in summary.checks:
            lines.append(f"| {check.stage} | {check.name} | {check.severity} | {_cell(check.description)} |")
    if summary.costs:
        lines += [
            "",
            "| Stage | Machine | Type | Lifetime (min) | Cost (USD) | Ended |",
            "|-------|---------|------|----------------|------------|-------|",
        ]
        for cost in summary.costs:
            lines.append(
                f"| {cost.stage} | {cost.machine.rsplit('/', 1)[-1]} | {cost.machine_type} | "
                f"{cost.lifetime_s / 60:.2f} | {cost.cost_usd:.4f} | {cost.ended} |"
            )
        lines.append(f"\nMachine cost tonight: ${sum(c.cost_usd for c in summary.costs):.4f}")
    return "\n".join(lines) + "\n"


def runs_markdown(runs: Sequence[NightRun]) -> list[str]:
    """The night's runs, newest first: when each started, how it ended and what it found. A re-run
    that failed early is listed beside the earlier run whose results the night still shows."""
    lines = ["### Runs of this night", "", "| Run | Started (UTC) | Outcome | Found |", "|---|---|---|---|"]
    for run in runs[:RUNS_LISTED]:
        name = f"`{run.run_id[:8]}`" + (" (current)" if run.current else "")
        lines.append(f"| {name} | {run.started:%Y-%m-%d %H:%M} | {run.status} | {_cell(run_found(run))} |")
    if len(runs) > RUNS_LISTED:
        lines.append(f"| … | {plural(len(runs) - RUNS_LISTED, 'earlier run')} | | |")
    return lines


def run_found(run: NightRun) -> str:
    """What one run of the night found, in a line: its first failure, else what it ran."""
    failed = [o for o in run.outcomes if o.status in ("failure", "cancelled")]
    if failed:
        first = failed[0]
        why = next((line for line in (first.detail or "").splitlines() if line.strip()), "")
        return f"{first.stage} {first.status}" + (f": {why}" if why else "")
    stages = list(dict.fromkeys(o.stage for o in run.outcomes))  # a summary written twice is one stage
    return f"{plural(len(stages), 'stage')} ran: " + ", ".join(stages)


def _earlier_reports(summary: NightSummary) -> dict[str, str]:
    """The suites whose report is an earlier run's than the current one (a re-run that did not
    reach them), each with that run's id; empty when the night has had one run."""
    if len(summary.runs) < 2:
        return {}
    current = summary.runs[0].run_id
    return {
        suite: f"`{run_id[:8]}` (earlier)"
        for suite, run_id in summary.suite_runs.items()
        if run_id and run_id != current
    }


def _cell(text: str, limit: int = CELL_CHARS) -> str:
    """One table cell: on one line, its pipes escaped, cut at a word past `limit` characters
    (marked "…"); the stage's folder (its link in the row) has the whole text."""
    flat = " ".join(text.split())
    if len(flat) > limit:
        cut = flat[:limit].rsplit(" ", 1)[0] if " " in flat[:limit] else flat[:limit]
        flat = cut.rstrip(" ,;:") + " …"
    return flat.replace("|", "\\|")
