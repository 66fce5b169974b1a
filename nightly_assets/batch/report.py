"""The sweep's analysis report: statistics per (nodes, ranks per node), plots, as PDF, Markdown and CSV.

Figures are made with matplotlib's object API (`Figure` + `PdfPages`), never pyplot: no GUI
backend and no process-wide state, so it is safe inside a Dagster run worker.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import statistics
import sys
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from nightly_assets.batch.sweep import SweepRow, row_from_json

if TYPE_CHECKING:  # matplotlib is imported when a report is drawn, not when the code location loads
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

CSV_FIELDS = ("nodes", "ranks_per_node", "trial", "job_id", "status", "value", "duration_s", "message")
TABLE_ROWS_PER_PAGE = 25
_PAGE = (11.69, 8.27)  # A4 landscape, inches
REPORT_RESULT = "report.json"  # what the analysis job made, for the stage that submitted it


@dataclass(frozen=True)
class PointStats:
    """One cell of the grid (nodes x ranks per node) over its trials."""

    nodes: int
    ranks_per_node: int
    trials_ok: int
    trials_failed: int
    mean: float | None
    min: float | None
    max: float | None
    stddev: float | None
    efficiency: float | None  # mean / (nodes x the 1-node mean at the same ranks per node)


@dataclass(frozen=True)
class ReportFiles:
    pdf: Path
    markdown: Path
    csv: Path
    pages: int
    message: str  # one line: what the report says, or why it has no numbers


def summarise(rows: Sequence[SweepRow]) -> list[PointStats]:
    values: dict[tuple[int, int], list[float]] = defaultdict(list)
    failed: dict[tuple[int, int], int] = defaultdict(int)
    for row in rows:
        cell = (row.point.nodes, row.point.ranks_per_node)
        if row.status == "ok" and row.value is not None:
            values[cell].append(row.value)
        else:
            failed[cell] += 1
    stats = []
    for nodes, ranks in sorted(set(values) | set(failed)):
        vals = values.get((nodes, ranks), [])
        mean = statistics.fmean(vals) if vals else None
        base = values.get((1, ranks))
        efficiency = mean / (nodes * statistics.fmean(base)) if mean is not None and base else None
        stats.append(
            PointStats(
                nodes,
                ranks,
                len(vals),
                failed.get((nodes, ranks), 0),
                mean,
                min(vals) if vals else None,
                max(vals) if vals else None,
                statistics.stdev(vals) if len(vals) > 1 else (0.0 if vals else None),
                efficiency,
            )
        )
    return stats


def write_report(
    rows: Sequence[SweepRow], out_dir: Path, *, title: str, metric: str = "images_per_sec"
) -> ReportFiles:
    """Write report.pdf, report.md and results.csv into `out_dir`; never fails on empty/failed input."""
    out_dir.mkdir(parents=True, exist_ok=True)
    stats = summarise(rows)
    ok = sum(1 for r in rows if r.status == "ok")
    if not rows:
        message = "The sweep produced no points: nothing was measured."
    elif ok == 0:
        message = f"All {len(rows)} points of the sweep failed: nothing was measured."
    else:
        message = f"{ok} of {len(rows)} points measured ({len(rows) - ok} failed)."
    files = ReportFiles(out_dir / "report.pdf", out_dir / "report.md", out_dir / "results.csv", 0, message)
    _write_csv(rows, files.csv)
    pages = _write_pdf(rows, stats, files.pdf, title, metric, message, measured=ok > 0)
    files = ReportFiles(files.pdf, files.markdown, files.csv, pages, message)
    files.markdown.write_text(_markdown(rows, stats, title, metric, message, files))
    return files


def _write_csv(rows: Sequence[SweepRow], path: Path) -> None:
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(CSV_FIELDS)
        for r in rows:
            p = r.point
            values = [_num(r.value), _num(r.duration_s), r.message]
            writer.writerow([p.nodes, p.ranks_per_node, p.trial, r.job_id or "", r.status, *values])


def _write_pdf(
    rows: Sequence[SweepRow],
    stats: list[PointStats],
    path: Path,
    title: str,
    metric: str,
    message: str,
    *,
    measured: bool,
) -> int:
    from matplotlib.backends.backend_pdf import PdfPages

    with PdfPages(path, metadata={"Title": title}) as pdf:
        if not measured:
            pdf.savefig(_text_page(title, [message, *_failures(rows)]))
            return int(pdf.get_pagecount())
        header = ["nodes", "ranks/node", "ok", "failed", "mean", "min", "max", "stddev", "efficiency"]
        for start in range(0, len(stats), TABLE_ROWS_PER_PAGE):
            chunk = stats[start : start + TABLE_ROWS_PER_PAGE]
            fig = _page()
            fig.suptitle(f"{title}\n{message}  ({metric})")
            ax = fig.add_subplot()
            ax.axis("off")
            table = ax.table(cellText=[_cells(s) for s in chunk], colLabels=header, loc="upper center")
            table.scale(1, 1.3)
            pdf.savefig(fig)
        pdf.savefig(_throughput_page(stats, metric))
        pdf.savefig(_efficiency_page(stats))
        return int(pdf.get_pagecount())


def _throughput_page(stats: list[PointStats], metric: str) -> Figure:
    fig = _page()
    ax = fig.add_subplot()
    for ranks in sorted({s.ranks_per_node for s in stats}):
        line = [s for s in stats if s.ranks_per_node == ranks and s.mean is not None]
        if not line:
            continue
        means = [s.mean or 0.0 for s in line]
        low = [m - (s.min or m) for m, s in zip(means, line, strict=True)]
        high = [(s.max or m) - m for m, s in zip(means, line, strict=True)]
        ax.errorbar([s.nodes for s in line], means, yerr=[low, high], marker="o", capsize=4, label=f"{ranks}")
    _nodes_axis(ax, stats)
    ax.set_ylim(bottom=0)
    ax.set_ylabel(f"{metric} (mean, bars: min-max over trials)")
    ax.set_title("Throughput vs nodes")
    ax.legend(title="ranks per node")
    ax.grid(True, alpha=0.3)
    return fig


def _efficiency_page(stats: list[PointStats]) -> Figure:
    fig = _page()
    ax = fig.add_subplot()
    for ranks in sorted({s.ranks_per_node for s in stats}):
        points = [
            (s.nodes, s.efficiency) for s in stats if s.ranks_per_node == ranks and s.efficiency is not None
        ]
        if points:
            ax.plot([n for n, _ in points], [e for _, e in points], marker="o", label=f"{ranks}")
    ax.axhline(1.0, linestyle="--", color="grey", linewidth=1)
    _nodes_axis(ax, stats)
    ax.set_ylabel("mean / (nodes x 1-node mean)")
    ax.set_title("Scaling efficiency vs 1 node, same ranks per node")
    if any(s.mean is not None and s.efficiency is None for s in stats):
        ax.text(
            0.01, 0.01, "missing lines: no successful 1-node point to compare with", transform=ax.transAxes
        )
    if ax.get_legend_handles_labels()[0]:
        ax.legend(title="ranks per node")
    ax.grid(True, alpha=0.3)
    return fig


def _page() -> Figure:
    """A blank A4 landscape page."""
    from matplotlib.figure import Figure

    return Figure(figsize=_PAGE)


def _nodes_axis(ax: Axes, stats: list[PointStats]) -> None:
    nodes = sorted({s.nodes for s in stats})
    ax.set_xscale("log", base=2)
    ax.set_xticks(nodes, [str(n) for n in nodes])
    ax.minorticks_off()
    ax.set_xlabel("nodes")


def _text_page(title: str, lines: list[str]) -> Figure:
    fig = _page()
    fig.text(0.05, 0.92, title, fontsize=16, weight="bold")
    fig.text(0.05, 0.85, "\n".join(lines[:40]), fontsize=10, va="top", family="monospace", wrap=True)
    return fig


def _failures(rows: Sequence[SweepRow]) -> list[str]:
    return [f"{r.point}: {r.job_id or '-'}: {r.message}"[:160] for r in rows if r.status != "ok"]


def _cells(s: PointStats) -> list[str]:
    return [
        str(s.nodes),
        str(s.ranks_per_node),
        str(s.trials_ok),
        str(s.trials_failed),
        *(_fmt(v) for v in (s.mean, s.min, s.max, s.stddev)),
        "n/a" if s.efficiency is None else f"{s.efficiency:.0%}",
    ]


def _markdown(
    rows: Sequence[SweepRow], stats: list[PointStats], title: str, metric: str, message: str, f: ReportFiles
) -> str:
    lines = [f"# {title}", "", message, ""]
    if stats and any(s.mean is not None for s in stats):
        lines += [
            f"Values: {metric}, over trials.",
            "",
            "| nodes | ranks/node | ok | failed | mean | min | max | stddev | efficiency |",
            "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
        ]
        lines += ["| " + " | ".join(_cells(s)) + " |" for s in stats]
        lines.append("")
    failures = _failures(rows)
    if failures:
        lines += ["## Failed points", ""] + [f"- {line.replace('|', '/')}" for line in failures] + [""]
    lines.append(f"Plots: `{f.pdf.name}` ({f.pages} pages). One row per point: `{f.csv.name}`.")
    return "\n".join(lines) + "\n"


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:,.1f}"


def _num(value: float | None) -> str:
    return "" if value is None else f"{value:.6g}"


def report_job_argv(rows_file: Path, out_dir: Path, *, title: str, metric: str) -> list[str]:
    """The analysis job on the batch machine: this module run by the code location's Python (which
    a site installs on the file system its compute nodes share)."""
    return [
        sys.executable,
        "-m",
        "nightly_assets.batch.report",
        str(rows_file),
        str(out_dir),
        f"--title={title}",
        f"--metric={metric}",
    ]


def read_report_result(out_dir: Path) -> ReportFiles:
    """What the analysis job wrote (report.json beside the files); a missing or bad one is a
    ValueError naming it."""
    path = out_dir / REPORT_RESULT
    try:
        data = json.loads(path.read_text())
        return ReportFiles(
            Path(data["pdf"]),
            Path(data["markdown"]),
            Path(data["csv"]),
            int(data["pages"]),
            str(data["message"]),
        )
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"the analysis job left no readable {path}: {exc}") from exc


def _main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Write the sweep's analysis report (PDF, Markdown, CSV).")
    parser.add_argument("rows", type=Path, help="JSON list of the sweep's rows (the sweep manifest's)")
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--title", required=True)
    parser.add_argument("--metric", default="images_per_sec")
    args = parser.parse_args(argv)
    rows = [row_from_json(r) for r in json.loads(args.rows.read_text())]
    files = write_report(rows, args.out_dir, title=args.title, metric=args.metric)
    result = {k: str(v) if isinstance(v, Path) else v for k, v in dataclasses.asdict(files).items()}
    (args.out_dir / REPORT_RESULT).write_text(json.dumps(result, indent=1))
    print(files.message)


if __name__ == "__main__":
    _main()
