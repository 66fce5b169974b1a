"""Benchmark trend charts as standalone SVG, drawn with matplotlib (already the tf_theta report's
plotting library): no script, no network at view time, text kept as text (smaller, searchable,
read by screen readers), and a <title> on every point naming its night, commit and value, which
browsers show on hover. Vega-Lite or Plotly would bring a JavaScript runtime to every page."""

from __future__ import annotations

import io
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from dataclasses import dataclass

import defusedxml.ElementTree as defused

SVG_NS = "http://www.w3.org/2000/svg"
POINTS_GID = "nightly-points"
STATUS_COLOURS = {"worse": "#b3261e", "better": "#1b6e20"}


@dataclass(frozen=True)
class ChartPoint:
    night: str  # ISO date
    value: float
    label: str  # the point's title: night, commit, value


@dataclass(frozen=True)
class Marker:
    """A vertical line at a night: a confirmed change ("worse"/"better") or a new configuration."""

    night: str
    kind: str  # "worse", "better" or "configuration"
    label: str


def why_no_charts() -> str | None:
    """Why this install cannot draw charts (matplotlib left out, as a GPU host's trimmed install
    leaves it: the pages then show the values as tables), or None."""
    try:
        import matplotlib  # noqa: F401
    except ImportError as exc:
        return f"matplotlib is not installed beside nightly_assets ({exc})"
    return None


def trend_svg(title: str, unit: str, points: Sequence[ChartPoint], markers: Sequence[Marker]) -> str:
    """One benchmark's values night by night, changes and configuration boundaries marked."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    nights = sorted({p.night for p in points} | {m.night for m in markers})
    x_of = {night: i for i, night in enumerate(nights)}
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "nightly", "font.size": 9}):
        figure = Figure(figsize=(8, 2.8), dpi=96)
        axes = figure.add_subplot()
        xs = [x_of[p.night] for p in points]
        ys = [p.value for p in points]
        axes.plot(xs, ys, color="#1f4e8c", linewidth=1)
        dots = axes.scatter(xs, ys, s=10, color="#1f4e8c", zorder=3)
        dots.set_gid(POINTS_GID)
        for marker in markers:
            colour = STATUS_COLOURS.get(marker.kind, "#6b4e16")
            style = "-" if marker.kind in STATUS_COLOURS else "--"
            axes.axvline(x_of[marker.night], color=colour, linestyle=style, linewidth=1.2)
        axes.set_ylabel(unit)
        axes.set_title(title, loc="left")
        ticks = list(range(0, len(nights), max(1, len(nights) // 8)))
        axes.set_xticks(ticks, [nights[i][5:] for i in ticks])
        axes.grid(axis="y", color="#dddddd")
        # Fixed margins, not tight_layout: it lays the figure out twice, half of a chart's time.
        figure.subplots_adjust(left=0.1, right=0.98, top=0.9, bottom=0.1)
        out = io.StringIO()
        figure.savefig(out, format="svg", metadata={"Date": None})
    return _titled(out.getvalue(), title, [p.label for p in points])


def _titled(svg: str, title: str, labels: Sequence[str]) -> str:
    """The SVG with an accessible name and a hover title on each point (matplotlib writes each
    marker of a scatter as a <use> inside the group of its gid, in the points' order)."""
    ET.register_namespace("", SVG_NS)
    ET.register_namespace("xlink", "http://www.w3.org/1999/xlink")
    root = defused.fromstring(svg)  # matplotlib's own output, parsed the safe way all the same
    root.set("role", "img")
    root.set("aria-label", title)
    heading = ET.Element(f"{{{SVG_NS}}}title")
    heading.text = title
    root.insert(0, heading)
    for group in root.iter(f"{{{SVG_NS}}}g"):
        if group.get("id") == POINTS_GID:
            for use, label in zip(group.iter(f"{{{SVG_NS}}}use"), labels, strict=False):
                point_title = ET.SubElement(use, f"{{{SVG_NS}}}title")
                point_title.text = label
    return ET.tostring(root, encoding="unicode")
