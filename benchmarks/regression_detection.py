"""Regression alerts scored on simulated nightly benchmark series with known shifts: the change-point
detector (`nightly_assets.benchmarks.changepoint`) beside the rule it replaced (tonight > 1.2 x the
median of the last 7 nights), both replayed night by night over the same series in one run.

The series (seeded, SERIES_PER_SHAPE of each noise shape, 90 to 150 nights, half latencies where
lower is better, half throughputs): Gaussian noise of 0.5 to 3 %, heavy tails (Student t, 3 degrees
of freedom), one-night outliers of 15 to 60 %, bimodal timings (a second mode 4 to 8 % away, 10 to
35 % of nights), and quiet series without any change. Changes: steps of 5 to 30 % for the worse (the
truth), steps for the better and fixes of an earlier regression (not regressions), slow drifts of 6
to 15 % over 4 to 8 nights (the truth night: the first night 5 % worse), and steps of 1 to 2 %
(neither required nor false when alerted).

An alert is a true positive when it is raised on a regression's truth night or up to 5 nights
later (one alert per regression); every other alert is false. Printed per detector: precision,
recall (of regressions >= 5 %), the mean detection delay in nights, the share of those found that
were found within 2 nights, and the alerts raised; and the detector's figures per noise shape.
Goal: precision >= 0.8 at recall >= 0.8, delay <= 2.

BENCH_SERIES=DIR also scores every `*.json` file of DIR: `{"values": [...], "changes": [index of the
first night at each new level, ...], "lower_is_better": true}` (labelled series of your own).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import random
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from nightly_assets.benchmarks.changepoint import Point, assess

SERIES_PER_SHAPE = 60
TOLERANCE = 5  # nights after the truth night an alert still counts as finding it
SHAPES = ("gaussian", "heavy_tails", "outliers", "bimodal", "quiet")
FIRST_NIGHT = dt.date(2026, 1, 1)


@dataclass
class Series:
    shape: str
    values: list[float]
    lower_is_better: bool
    # (first night of the change, truth night: the first night 5 % worse) of each regression >= 5 %
    regressions: list[tuple[int, int]] = field(default_factory=list)
    ignored: list[int] = field(default_factory=list)  # small shifts: an alert near one is neither


def simulate(shape: str, rng: random.Random) -> Series:
    nights = rng.randint(90, 150)
    lower_is_better = rng.random() < 0.5
    worse = 1.0 if lower_is_better else -1.0
    level = [1.0] * nights
    series = Series(shape, [], lower_is_better)
    if shape != "quiet":
        t = rng.randint(12, 30)
        while t < nights - 8:
            kind = rng.choices(["step", "better", "drift", "small", "fix"], [5, 2, 2, 1, 2])[0]
            if kind == "drift":
                total, span = rng.uniform(0.06, 0.15), rng.randint(4, 8)
                base = level[t - 1]
                for i in range(t, nights):
                    level[i] = base * (1 + worse * total * min(1.0, (i - t + 1) / span))
                series.regressions.append(
                    (t, next(i for i in range(t, nights) if abs(level[i] / base - 1) >= 0.05))
                )
            else:
                size = {"step": (0.05, 0.3), "better": (0.05, 0.3), "small": (0.01, 0.02)}.get(
                    kind, (0.05, 0.3)
                )
                change = rng.uniform(*size) * (-worse if kind == "better" else worse)
                base = level[t - 1]
                for i in range(t, nights):
                    level[i] = base * (1 + change)
                if kind == "small":
                    series.ignored.append(t)
                elif kind != "better":
                    series.regressions.append((t, t))
                if kind == "fix":  # a regression, then the fix back to the old level
                    back = t + rng.randint(5, 12)
                    if back < nights:
                        for i in range(back, nights):
                            level[i] = base
                    t = back
            t += rng.randint(12, 30)
    sigma = rng.uniform(0.005, 0.03)
    mode_gap, mode_share = rng.uniform(0.04, 0.08), rng.uniform(0.1, 0.35)
    scale = rng.uniform(0.5, 500.0)
    quiet_sigma = rng.choice([0.002, 0.01, 0.02])
    for i in range(nights):
        if shape == "heavy_tails":
            noise = (
                sigma
                * 0.6
                * rng.gauss(0, 1)
                / max(1e-3, (sum(rng.gauss(0, 1) ** 2 for _ in range(3)) / 3) ** 0.5)
            )
        elif shape == "quiet":
            noise = rng.gauss(0, quiet_sigma)
        else:
            noise = rng.gauss(0, sigma)
        value = level[i] * (1 + noise)
        if shape == "outliers" and rng.random() < 0.05:
            value *= 1 + rng.uniform(0.15, 0.6) * (1 if rng.random() < 0.8 else -0.5)
        if shape == "bimodal" and rng.random() < mode_share:
            value *= 1 + mode_gap
        series.values.append(max(value, 1e-9) * scale)
    return series


def detector_alerts(series: Series) -> list[int]:
    points = [Point(FIRST_NIGHT + dt.timedelta(days=i), v) for i, v in enumerate(series.values)]
    found = assess(points, lower_is_better=series.lower_is_better).change_points
    return [(c.confirmed - FIRST_NIGHT).days for c in found if c.worse]


def median_rule_alerts(series: Series, slowdown: float = 1.2, nights: int = 7) -> list[int]:
    """Today's rule: every night worse than `slowdown` x the median of the previous `nights`."""
    alerts = []
    for t in range(1, len(series.values)):
        baseline = statistics.median(series.values[max(0, t - nights) : t])
        ratio = series.values[t] / baseline
        if (ratio > slowdown) if series.lower_is_better else (ratio < 1 / slowdown):
            alerts.append(t)
    return alerts


@dataclass
class Score:
    alerts: int = 0
    true: int = 0
    regressions: int = 0
    delays: list[int] = field(default_factory=list)

    def add(self, series: Series, alerts: list[int]) -> None:
        unmatched = sorted(series.regressions)
        self.regressions += len(unmatched)
        for night in alerts:
            match = next((r for r in unmatched if r[0] <= night <= r[1] + TOLERANCE), None)
            if match is not None:
                unmatched.remove(match)
                self.true += 1
                self.delays.append(max(0, night - match[1]))
            elif any(s <= night <= s + TOLERANCE for s in series.ignored):
                continue  # a small shift found: neither required nor false
            self.alerts += 1  # a second alert for a regression already found is false too

    @property
    def precision(self) -> float:
        return self.true / self.alerts if self.alerts else 1.0

    @property
    def recall(self) -> float:
        return self.true / self.regressions if self.regressions else 1.0

    def line(self, name: str) -> str:
        return (
            f"  {name:<22} precision {self.precision:5.2f}  recall {self.recall:5.2f}  "
            f"delay mean {self.mean_delay:4.2f}, <= 2 nights {self.prompt:4.0%}  "
            f"alerts {self.alerts:5d} (true {self.true}) of {self.regressions} regressions"
        )

    @property
    def mean_delay(self) -> float:
        return statistics.mean(self.delays) if self.delays else 0.0

    @property
    def prompt(self) -> float:
        """The share of the regressions found that were found within 2 nights of their truth night."""
        return sum(d <= 2 for d in self.delays) / len(self.delays) if self.delays else 1.0


def labelled_series(folder: Path) -> list[Series]:
    """The labelled series of `folder`; a labelled change for the better is not a regression."""
    found = []
    for path in sorted(folder.glob("*.json")):
        document = json.loads(path.read_text())
        series = Series(
            path.stem, [float(v) for v in document["values"]], bool(document.get("lower_is_better", True))
        )
        for i in (int(i) for i in document.get("changes", [])):
            before = statistics.median(series.values[max(0, i - 5) : i] or series.values[i : i + 1])
            after = statistics.median(series.values[i : i + 5])
            worse = after > before if series.lower_is_better else after < before
            (series.regressions.append((i, i)) if worse else series.ignored.append(i))
        found.append(series)
    return found


def score(all_series: list[Series], detector: Callable[[Series], list[int]]) -> Score:
    result = Score()
    for series in all_series:
        result.add(series, detector(series))
    return result


def main() -> dict[str, float]:
    rng = random.Random(20261124)
    simulated = [simulate(shape, rng) for shape in SHAPES for _ in range(SERIES_PER_SHAPE)]
    print(
        f"regression_detection: {len(simulated)} simulated series, "
        f"{sum(len(s.values) for s in simulated)} nights, "
        f"{sum(len(s.regressions) for s in simulated)} regressions >= 5 %"
    )
    new, old = score(simulated, detector_alerts), score(simulated, median_rule_alerts)
    print(old.line("median rule (1.2 x 7)"))
    print(new.line("change-point detector"))
    for shape in SHAPES:
        print(score([s for s in simulated if s.shape == shape], detector_alerts).line(f"  {shape}"))
    ratios = {
        "regression_precision": new.precision,
        "regression_recall": new.recall,
        "regression_delay_mean": new.mean_delay,
        "regression_found_within_2_nights": new.prompt,
        "regression_precision_vs_median_rule": new.precision / old.precision if old.precision else 0.0,
    }
    if folder := os.environ.get("BENCH_SERIES"):
        labelled = labelled_series(Path(folder))
        mine = score(labelled, detector_alerts)
        print(f"labelled series of {folder}: {len(labelled)}")
        print(score(labelled, median_rule_alerts).line("median rule (1.2 x 7)"))
        print(mine.line("change-point detector"))
        ratios |= {"labelled_precision": mine.precision, "labelled_recall": mine.recall}
    return ratios
