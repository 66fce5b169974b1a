"""The results site's pages: `SiteData` turned into what each Jinja template shows (templates/),
links to the artefact store for evidence and page-relative links between pages."""

from __future__ import annotations

import datetime as dt
import hashlib
import statistics
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from nightly_assets.results import NightKey
from nightly_assets.site.charts import ChartPoint, Marker, trend_svg, why_no_charts
from nightly_assets.site.data import HEALTH_NIGHTS, BenchmarkSeries, SiteData
from nightly_assets.testing.signatures import grouped
from nightly_assets.warehouse.history import TestRun
from nightly_assets.words import plural

SCHEMA = "nightly-results/1"
NAV = (
    ("index.html", "Nights"),
    ("health.html", "Test health"),
    ("perf.html", "Performance"),
    ("cost.html", "Cost and time"),
    ("alerts.html", "Alerts"),
)
SHOWN_IN_GROUP = 5  # tests named per failure signature on the health page
MESSAGE_CHARS = 300  # a failure's first lines; the whole message is in its report
SUMMARY_KIND = "night_summary"  # the stage kind whose folder holds the night's summary.md

FolderUrl = Callable[[NightKey, str], str]


@dataclass
class _Month:
    hours: float = 0.0
    cost: float = 0.0
    nights: set[NightKey] = field(default_factory=set)
    over: int = 0  # runs over the per-run budget


@dataclass(frozen=True)
class Page:
    path: str  # relative to the site's folder
    html: str


def history_page_path(suite: str, test_id: str) -> str:
    """A test's page: the suite and a digest of its id (ids hold characters no file name may)."""
    digest = hashlib.sha256(f"{suite}\0{test_id}".encode()).hexdigest()[:16]
    return f"tests/{suite}-{digest}.html"


def commit_href(url: str, sha: str) -> str | None:
    """A commit's page where the repository is a public forge; None for local and sample ones."""
    if url.startswith("https://") and ("github.com/" in url or "gitlab.com/" in url):
        return f"{url.removesuffix('.git').rstrip('/')}/commit/{sha}"
    return None


class SiteRenderer:
    """Renders the pages of one pipeline's site from its data."""

    def __init__(self, data: SiteData, folder_url: FolderUrl, *, public: bool = False) -> None:
        import jinja2

        self.data = data
        self.public = public  # where alerts went (files, channels) is for the team only
        self.folder_url = folder_url
        self.env = jinja2.Environment(
            loader=jinja2.PackageLoader("nightly_assets.site", "templates"),
            autoescape=True,
            undefined=jinja2.StrictUndefined,
            trim_blocks=False,
        )

    def _summary_href(self, key: NightKey) -> str:
        """The night's summary, in the folder of the pipeline's own summary stage."""
        summaries = self.data.pipeline.stages_of(SUMMARY_KIND)
        return self.folder_url(key, summaries[0].name if summaries else SUMMARY_KIND) + "summary.md"

    def _render(self, template: str, path: str, title: str, **context: Any) -> Page:
        depth = path.count("/")
        html = self.env.get_template(template).render(
            pipeline=self.data.pipeline,
            page_title=title,
            nav=NAV,
            current=path,
            root="../" * depth,
            built_at=self.data.built_at.strftime("%Y-%m-%d %H:%M"),
            schema=SCHEMA,
            **context,
        )
        return Page(path, html)

    # -- the nights grid -------------------------------------------------------------------

    def grid(self) -> Page:
        repos = {r.name: r.url for r in self.data.pipeline.repositories}
        rows = []
        for overview in self.data.nights:
            key = overview.night.key
            stage_rows = {row.stage: row for row in self.data.stage_rows.get(key, [])}
            cells: list[dict[str, Any] | None] = []
            for stage in self.data.stage_names:
                row = stage_rows.get(stage)
                if row is None:
                    cells.append(None)
                    continue
                counts = overview.suites.get(stage)
                cells.append(
                    {
                        "status": row.status,
                        "href": self._stage_href(key, stage, row.artefact),
                        "title": (row.detail or f"{stage}: {row.status}")[:MESSAGE_CHARS],
                        "counts": _counts_text(counts) if counts else "",
                        "marks": self._marks(key, stage),
                    }
                )
            rows.append(
                {
                    "night": overview.night.night.isoformat(),
                    "target": overview.night.target,
                    "status": overview.night.status,
                    "summary": self._summary_href(key),
                    "cells": cells,
                    "pins": [
                        {"repo": repo, "short": sha[:10], "href": commit_href(repos.get(repo, ""), sha)}
                        for repo, sha in sorted(overview.night.pins.items())
                    ],
                    "devices": "; ".join(self.data.device_lines.get(key, [])),
                }
            )
        return self._render("grid.html.j2", "index.html", "Nights", rows=rows, stages=self.data.stage_names)

    def _stage_href(self, key: NightKey, stage: str, artefact: str | None) -> str:
        # A folder set aside for an earlier run is recorded as the stage's artefact (ends in /).
        if artefact and artefact.endswith("/") and "://" in artefact:
            return artefact
        return self.folder_url(key, stage)

    def _marks(self, key: NightKey, stage: str) -> str:
        verdicts = self.data.verdicts.get(key.target, [])
        if self.data.verdict_nights.get(key.target) != key.night:
            return ""
        broken = sum(1 for v in verdicts if v.suite == stage and v.state == "broken")
        flaky = sum(1 for v in verdicts if v.suite == stage and v.state == "flaky")
        marks = [
            plural(broken, "broken test") if broken else "",
            plural(flaky, "flaky test") if flaky else "",
        ]
        return ", ".join(m for m in marks if m)

    # -- test health ------------------------------------------------------------------------

    def health(self, paged: set[tuple[str, str]]) -> Page:
        """Shares, broken and flaky tests, and the window's failed tests (linked where `paged`)."""
        thresholds = self.data.pipeline.thresholds
        shares, broken, flaky = [], [], []
        for target, verdicts in sorted(self.data.verdicts.items()):
            night = self.data.verdict_nights[target]
            overview = next(
                o for o in self.data.nights if o.night.target == target and o.night.night == night
            )
            total = sum(c.get("total", 0) for c in overview.suites.values())
            flaky_count = sum(1 for v in verdicts if v.state == "flaky")
            share = flaky_count / total if total else 0.0
            shares.append(
                {
                    "target": target,
                    "night": night.isoformat(),
                    "flaky_share": f"{share:.1%} of {plural(total, 'test')}",
                    "limit": f"{thresholds.flaky_share_max:.0%}",
                    "over": share > thresholds.flaky_share_max,
                    "broken": sum(1 for v in verdicts if v.state == "broken"),
                    "flaky": flaky_count,
                }
            )
            for v in verdicts:
                entry = {
                    "test": v.test_id,
                    "href": history_page_path(v.suite, v.test_id),
                    "target": target,
                    "reason": v.reason,
                    "quarantined": v.quarantined,
                }
                if v.state == "broken":
                    suspects = "; ".join(
                        f"{repo} {s.get('good', '?')[:10]}..{s.get('bad', '?')[:10]}"
                        for repo, s in sorted(v.suspects.items())
                    )
                    since = v.first_bad.isoformat() if v.first_bad else "?"
                    broken.append({**entry, "since": since, "suspects": suspects or "—", "culprit": "—"})
                elif v.state == "flaky":
                    rate = "—" if v.pass_rate is None else f"{v.pass_rate:.0%} passed"
                    flaky.append({**entry, "rate": rate})
        failed = [
            {
                "test": f.test_id,
                "suite": f.suite,
                "href": history_page_path(f.suite, f.test_id) if (f.suite, f.test_id) in paged else None,
                "count": f.count,
                "last": f.last.isoformat(),
                "message": (f.last_message or "")[:MESSAGE_CHARS],
            }
            for f in self.data.failed_tests
        ]
        # the window's failures by the signature of their last message: a shared cause shows as one row
        groups = grouped((f"{f.suite}::{f.test_id}", f.last_message) for f in self.data.failed_tests)
        signatures = [
            {"signature": sig, "count": len(tests), "tests": ", ".join(tests[:SHOWN_IN_GROUP])}
            | {"more": len(tests) - SHOWN_IN_GROUP if len(tests) > SHOWN_IN_GROUP else 0}
            for sig, tests in groups
        ]
        return self._render(
            "health.html.j2",
            "health.html",
            "Test health",
            shares=shares,
            broken=broken,
            flaky=flaky,
            failed=failed,
            signatures=signatures,
            window=plural(HEALTH_NIGHTS, "night"),
        )

    def history_page(
        self, suite: str, test_id: str, runs: list[TestRun], limit: int, as_of: dt.date | None = None
    ) -> Page:
        shown = []
        for run in runs:
            key = NightKey(self.data.pipeline.name, run.night, run.target)
            shown.append(
                {
                    "night": run.night.isoformat(),
                    "target": run.target,
                    "outcome": run.case.outcome,
                    "css": run.case.outcome,
                    "attempts": run.case.attempts,
                    "seconds": f"{run.case.duration_s:.2f}",
                    "message": (run.case.message or "")[:MESSAGE_CHARS],
                    "href": self.folder_url(key, suite),
                }
            )
        path = history_page_path(suite, test_id)
        as_of_text = as_of.isoformat() if as_of is not None else None
        context = {"suite": suite, "runs": shown, "limit": limit, "as_of": as_of_text}
        return self._render("test.html.j2", path, test_id, **context)

    # -- performance ------------------------------------------------------------------------

    def perf(self) -> Page:
        return self._render("perf.html.j2", "perf.html", "Performance", charts=list(self._charts()))

    def _charts(self) -> Iterator[dict[str, Any]]:
        for series in self.data.benchmarks:
            if series.points:
                yield self.chart(series)

    def chart(self, series: BenchmarkSeries) -> dict[str, Any]:
        name = series.benchmark
        pipeline = self.data.pipeline.name
        points, table, markers = [], [], []
        no_chart = why_no_charts()
        previous_config: str | None = None
        for p in series.points:
            pins = ", ".join(f"{repo}@{sha[:10]}" for repo, sha in sorted(p.pins.items()))
            label = f"{p.night.isoformat()}: {p.value:g} {name.unit} ({pins or 'no pins'})"
            points.append(ChartPoint(p.night.isoformat(), p.value, label))
            if previous_config is not None and p.config_key != previous_config:
                markers.append(Marker(p.night.isoformat(), "configuration", "new device configuration"))
            previous_config = p.config_key
            key = NightKey(pipeline, p.night, name.target)
            table.append(
                {
                    "night": p.night.isoformat(),
                    "value": f"{p.value:g}",
                    "pins": pins,
                    "config": p.config_key or "—",
                    "href": self._summary_href(key),
                }
            )
        changes = []
        nights = {p.night for p in series.points}
        for r in series.regressions:
            kind = "worse" if r.worse else "better"
            if r.first_bad in nights:
                markers.append(Marker(r.first_bad.isoformat(), kind, f"{kind} from {r.first_bad}"))
            changes.append(
                f"{r.first_bad}: {kind}, {r.before:g} → {r.after:g} {r.unit} (last good {r.last_good})"
            )
        title = f"{name.name} on {name.target}"
        caption = (
            f"{plural(len(points), 'night')} from {points[0].night} to {points[-1].night}; "
            f"{plural(len(series.regressions), 'confirmed change')}, "
            f"{plural(sum(1 for m in markers if m.kind == 'configuration'), 'configuration change')}."
        )
        return {
            "slug": series.slug,
            "name": name.name,
            "target": name.target,
            "unit": name.unit,
            "lower_is_better": name.lower_is_better,
            "svg": trend_svg(title, name.unit, points, markers) if no_chart is None else "",
            "no_chart": no_chart,
            "caption": caption,
            "changes": changes,
            "table": table,
        }

    # -- cost and time ----------------------------------------------------------------------

    def cost(self) -> Page:
        budget = self.data.pipeline.thresholds.cost_budget_usd
        costs: list[dict[str, Any]] = []
        months: dict[str, _Month] = defaultdict(_Month)
        for key, c in self.data.costs:
            over = budget is not None and c.cost_usd > budget
            costs.append(
                {
                    "night": key.night.isoformat(),
                    "target": key.target,
                    "stage": c.stage,
                    "machine_type": c.machine_type,
                    "hours": f"{c.lifetime_s / 3600:.2f}",
                    "hourly": f"{c.hourly_usd:.2f}",
                    "cost": f"{c.cost_usd:.4f}",
                    "ended": c.ended,
                    "over": over,
                }
            )
            month = months[key.night.strftime("%Y-%m")]
            month.hours += c.lifetime_s / 3600
            month.cost += c.cost_usd
            month.nights.add(key)
            month.over += int(over)
        month_rows = [
            {
                "month": name,
                "hours": f"{m.hours:.2f}",
                "cost": f"{m.cost:.2f}",
                "nights": len(m.nights),
                "budget": "—" if budget is None else f"{budget:.2f}",
                "over": m.over,
            }
            for name, m in sorted(months.items(), reverse=True)
        ]
        return self._render(
            "cost.html.j2",
            "cost.html",
            "Cost and time",
            costs=list(reversed(costs)),
            months=month_rows,
            stage_times=self._stage_times(),
        )

    def _stage_times(self) -> list[dict[str, Any]]:
        minutes: dict[str, list[tuple[dt.date, float]]] = defaultdict(list)
        for key, rows in self.data.stage_rows.items():
            for row in rows:
                if row.status != "running":
                    minutes[row.stage].append((key.night, row.duration_s / 60))
        found = []
        for stage in self.data.stage_names:
            values = sorted(minutes.get(stage, []))
            if values:
                only = [v for _, v in values]
                found.append(
                    {
                        "stage": stage,
                        "nights": len(values),
                        "median": f"{statistics.median(only):.1f}",
                        "longest": f"{max(only):.1f}",
                        "last": f"{values[-1][1]:.1f}",
                    }
                )
        return found

    # -- alerts -----------------------------------------------------------------------------

    def alerts(self) -> Page:
        alerts = [
            {
                "sent": a.sent_at.strftime("%Y-%m-%d %H:%M"),
                "night": key.night.isoformat(),
                "target": key.target,
                "severity": a.severity,
                "title": a.title,
                "text": a.text,
                "destination": "the team's channel" if self.public else a.destination,
                "href": self._summary_href(key),
            }
            for key, a in self.data.alerts
        ]
        return self._render("alerts.html.j2", "alerts.html", "Alerts", alerts=alerts)


def _counts_text(counts: dict[str, int]) -> str:
    ran = counts.get("passed", 0) + counts.get("failed", 0) + counts.get("error", 0)
    if ran == 0 and counts.get("collected"):
        return f"{counts['collected']} collected, not run"  # a GPU suite on a host without one
    text = f"{counts.get('passed', 0)}/{ran} passed"
    if counts.get("skipped"):
        text += f", {counts['skipped']} skipped"
    return text
