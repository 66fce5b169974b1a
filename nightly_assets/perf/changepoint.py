"""Change points in a benchmark's nightly series: the night a benchmark got worse (or better) and
stayed so, found online, the way the nights arrive.

Each night is compared with the *regime* it belongs to: the nights since the last change point.
A change is confirmed when the newest `m` nights (2 to `max_confirm`) all sit beyond the regime's
level, in one direction, by

- at least `min_change` of the level (a 3 % default: smaller shifts are not worth a page), and
- a robust z-score: the noise is the MAD of the regime's residuals, pooled with the previous
  regime's while the current one is short, and never below `noise_floor` of the level; two nights
  must each be `z_two` noise widths away, three `z_three`, more `z_more` (drifts), and
- a rank test: each of them beyond the `rank` quantile of the regime's recent nights, so the
  second mode of a bimodal timing or a recent outlier is no shift.

The noise is never less than the night-to-night spread (the MAD of the steps between consecutive
nights, over sqrt(2)): a level that wanders, a random walk or a drift, is wider noise, not a
change each time it has wandered far from its median. Where the nights alternate (a zig-zag: the
lag-1 autocorrelation below what independent nights reach at 1 %), the steps are taken two nights
apart: consecutive ones hold the swing twice and would hide a step several times the noise.

A weekly pattern (weekend nights on a quieter cluster) is taken out first: when the regime's last
`season_window` nights differ by weekday (a Kruskal-Wallis test at 1 %), each night is compared
after its weekday's offset, so the swing neither hides a step as noise nor alerts as one.

Two nights at least: a single outlier never alerts, and a step is confirmed one or two nights
after it. The change point is the first of those nights; the nights before it that share its
pinned commits (re-runs of the same code) are not part of the baseline twice: consecutive nights
with identical pins count as one baseline value, their median. After a change the new level is
the regime, so the alert is raised once, on the night the change is confirmed, not every night
after (a further change in the same direction within `settle` nights continues it while the
level was still moving, a drift, and is a change of its own once the level had held); the nights
it flagged never become the old level's baseline. With fewer than
`min_history` nights in the first regime the state is "insufficient data", never an alert.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import itertools
import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

State = Literal["insufficient data", "ok", "suspect", "regressed", "improved"]
Pins = tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class Settings:
    min_history: int = 7  # nights before the first verdict
    min_regime: int = 3  # nights at a new level before it can change again
    settle: int = 10  # a change in the same direction this soon after one continues it
    window: int = 20  # recent nights of the regime that make its level
    min_change: float = 0.03  # relative change below which nothing alerts
    noise_floor: float = 0.002  # the least relative noise assumed (a benchmark that never varies)
    z_two: float = 4.0
    z_three: float = 3.0
    z_more: float = 2.5
    max_confirm: int = 4  # the most nights a change may take to confirm (a slow drift)
    z_ends: float = 2.0  # the first and the newest night of three or more
    alpha: float = 0.01  # the rank test's level
    # Nights a weekly pattern is looked for in: five of each weekday, where the weekday test's
    # chi-square approximation holds (its usual rule: five per group).
    season_window: int = 35
    # The noise is at least the night-to-night spread (below): off, the detector as it was before
    # (regression_detection's comparison).
    step_noise: bool = True


@dataclass(frozen=True)
class Point:
    """One night's value of one benchmark, with the commits the night pinned."""

    night: dt.date
    value: float
    pins: Pins = ()

    @staticmethod
    def of(night: dt.date, value: float, pins: Mapping[str, str] | None = None) -> Point:
        return Point(night, value, tuple(sorted((pins or {}).items())))


@dataclass(frozen=True)
class ChangePoint:
    """A confirmed change: the first night at the new level and the last one at the old."""

    first_bad: dt.date
    last_good: dt.date
    confirmed: dt.date  # the night the change was confirmed (when it alerts)
    before: float  # the old level: the regime's median
    after: float  # the new level: the median of the nights that confirmed it
    worse: bool
    commits: dict[str, tuple[str | None, str | None]] = field(default_factory=dict)

    @property
    def change(self) -> float:
        """Relative change of the level, signed as the values go."""
        return (self.after - self.before) / abs(self.before) if self.before else math.inf

    def describe(self, unit: str = "") -> str:
        word = "regressed" if self.worse else "improved"
        suffix = f" {unit}" if unit else ""
        return (
            f"{word} {abs(self.change):.1%} from {self.first_bad} on "
            f"({self.before:.4g}{suffix} → {self.after:.4g}{suffix}; last good night {self.last_good})"
        )


@dataclass(frozen=True)
class Assessment:
    """Where the newest night stands."""

    state: State
    baseline: float | None  # the level tonight is compared with
    nights: int  # how many nights make that level
    change_points: tuple[ChangePoint, ...]  # every change found in the series, oldest first
    new: ChangePoint | None  # the change confirmed tonight: what alerts


def assess(series: Sequence[Point], *, lower_is_better: bool, settings: Settings = Settings()) -> Assessment:
    """Replay `series` (oldest night first) and say where its newest night stands."""
    replay = Replay(lower_is_better, settings)
    for point in series:
        replay.add(point)
    return replay.assessment()


class Replay:
    """The detector, one night at a time: `add` each night as it arrives (what `assess` does with a
    whole series); `remeasured` replaces the newest night's value by a re-measurement of it and
    judges that night again, as if the first value had never been seen."""

    def __init__(self, lower_is_better: bool, settings: Settings = Settings()) -> None:
        self.points: list[Point] = []
        self.values: list[float] = []
        self.index: dict[dt.date, int] = {}
        self.sign = 1.0 if lower_is_better else -1.0  # makes "worse" positive
        self.s = settings
        self.start = 0  # first index of the current regime
        self.previous: tuple[int, int] | None = None  # the regime before it
        self.found: list[ChangePoint] = []
        self.new: ChangePoint | None = None
        self.new_nights = 0  # the nights that made the old level of `new`
        self.suspect = False
        self._offsets: dict[tuple[int, int], dict[int, float]] = {}
        self._before_newest: tuple[int, tuple[int, int] | None, list[ChangePoint]] = (0, None, [])

    def add(self, point: Point) -> ChangePoint | None:
        """Judge one more night; returns the change it confirms (what alerts), if any."""
        self.index[point.night] = len(self.points)
        self.points.append(point)
        self.values.append(point.value)
        self._before_newest = (self.start, self.previous, list(self.found))
        self.step(len(self.points) - 1)
        return self.new

    def remeasured(self, value: float) -> ChangePoint | None:
        """Judge the newest night again with `value` in place of the one `add` judged."""
        self.start, self.previous, found = self._before_newest
        self.found = list(found)
        self.points[-1] = dataclasses.replace(self.points[-1], value=value)
        self.values[-1] = value
        self.step(len(self.points) - 1)
        return self.new

    def step(self, t: int) -> None:
        self.new, self.suspect = None, False
        first_regime = self.previous is None
        needed = self.s.min_history if first_regime else self.s.min_regime
        best: tuple[int, float] | None = None
        for m in range(2, self.s.max_confirm + 1):
            c = t - m + 1
            if c - self.start < needed:
                break
            direction = self._confirms(c, t)
            if direction:
                best = (c, direction)
        if best is None:
            if t - self.start >= needed:
                self.suspect = self._confirms(t, t, single=True) > 0
            return
        c, direction = best
        ref = self._reference(c)
        before = statistics.median(ref)
        after = statistics.median(self.values[c : t + 1])
        last = self.found[-1] if self.found else None
        settled = self._settled(self.start, c, ref)
        self.previous, self.start = (self.start, c), c
        if (
            last is not None
            and last.worse == (direction > 0)
            and c - self.index[last.first_bad] <= self.s.settle
            and not settled
        ):
            # The same change still under way (a drift, a second step close behind): one alert.
            self.found[-1] = dataclasses.replace(last, after=after)
            return
        point = ChangePoint(
            first_bad=self.points[c].night,
            last_good=self.points[c - 1].night,
            confirmed=self.points[t].night,
            before=before,
            after=after,
            worse=direction > 0,
            commits=_commits(self.points[c - 1].pins, self.points[c].pins),
        )
        self.found.append(point)
        self.new, self.new_nights = point, len(ref)

    def _settled(self, start: int, c: int, ref: list[float]) -> bool:
        """Whether the regime before `c` held one level (a step), rather than still moving (a
        drift): its second half's median within the noise of its first half's."""
        regime = self.values[start:c]
        if len(regime) < 4:
            return False  # too short to tell: still under way
        half = len(regime) // 2
        level = statistics.median(ref)
        moved = abs(statistics.median(regime[half:]) - statistics.median(regime[:half]))
        return moved < max(self.s.min_change * abs(level), 2 * self._noise(ref, level))

    def _reference(self, c: int) -> list[float]:
        """The regime's recent level before night `c`: runs of equal pins count once (their median)."""
        lo = max(self.start, c - self.s.window)
        values: list[float] = []
        run: list[float] = []
        for i in range(lo, c):
            if run and self.points[i].pins and self.points[i].pins == self.points[i - 1].pins:
                run.append(self.values[i])
                continue
            if run:
                values.append(statistics.median(run))
            run = [self.values[i]]
        if run:
            values.append(statistics.median(run))
        return values

    def _noise(self, ref: list[float], level: float) -> float:
        """Robust noise width: MAD of the regime's residuals, pooled with the previous regime's."""
        residuals = [v - level for v in ref]
        if len(ref) < self.s.min_history and self.previous is not None:
            lo, hi = self.previous
            earlier = self.values[max(lo, hi - self.s.window) : hi]
            if earlier:
                old_level = statistics.median(earlier)
                scale = abs(level / old_level) if old_level else 1.0
                residuals += [(v - old_level) * scale for v in earlier]
        mad = statistics.median(abs(r) for r in residuals) * 1.4826
        return max(mad, self.s.noise_floor * abs(level), 1e-12)

    def _weekly(self, c: int, level: float) -> dict[int, float]:
        """Each weekday's offset from `level` when the regime's recent nights before `c` differ by
        weekday (a weekly pattern); empty when they do not, or are too few to tell."""
        key = (self.start, c)
        if key not in self._offsets:
            lo = max(self.start, c - self.s.season_window)
            by_day: dict[int, list[float]] = {}
            for i in range(lo, c):
                by_day.setdefault(self.points[i].night.weekday(), []).append(self.values[i] - level)
            # Two nights of each weekday at least: with one, the test statistic is the same
            # whatever the values (it cannot tell).
            enough = len(by_day) == 7 and min(len(v) for v in by_day.values()) >= 2
            weekly = enough and _kruskal_wallis(list(by_day.values())) >= CHI2_6_99
            self._offsets[key] = {d: statistics.median(v) for d, v in by_day.items()} if weekly else {}
        return self._offsets[key]

    def _confirms(self, c: int, t: int, *, single: bool = False) -> float:
        """+1 when nights c..t sit worse than the regime before c, -1 better, 0 neither."""
        ref = self._reference(c)
        level = statistics.median(ref)
        offsets = self._weekly(c, level)

        def seasonless(i: int) -> float:
            return self.values[i] - offsets.get(self.points[i].night.weekday(), 0.0)

        if offsets:  # a weekly pattern: each night after its weekday's offset, night by night
            ref = [seasonless(i) for i in range(max(self.start, c - self.s.window), c)]
        noise = self._noise(ref, level)
        if self.s.step_noise and len(ref) >= 4:
            noise = max(noise, _step_spread(ref, self.s.alpha))
        post = [(seasonless(i) - level) * self.sign for i in range(c, t + 1)]
        m = len(post)
        z = self.s.z_two if m <= 2 or single else self.s.z_three if m == 3 else self.s.z_more
        least = self.s.min_change * abs(level)
        for direction in (1.0, -1.0):
            shifted = [d * direction for d in post]
            # The first two nights (a change point, not an outlier before one) and the newest
            # (still changed tonight) must be beyond; with four or more, one night between may be
            # an outlier the other way.
            ends = [shifted[0], shifted[1], shifted[-1]] if m >= 3 else shifted
            if min(ends) < max(least, self.s.z_ends * noise) or statistics.median(shifted) < max(
                least, z * noise
            ):
                continue
            # Rank test: how many of the regime's nights are at least as far out as each night.
            recent = [(v - level) * self.sign * direction for v in ref]
            tail = sorted(shifted)[1:] if m >= 3 else shifted
            p = math.prod((sum(r >= d for r in recent) + 1) / (len(recent) + 1) for d in tail)
            if single or p <= self.s.alpha * (1 + 1e-9):  # one night alone is a suspicion, not a test
                return direction
        return 0.0

    def assessment(self) -> Assessment:
        t = len(self.points) - 1
        found = tuple(self.found)
        if t < 0 or (self.previous is None and t - self.start < self.s.min_history):
            return Assessment("insufficient data", None, max(t, 0), found, None)
        if self.new is not None:
            return Assessment(
                "regressed" if self.new.worse else "improved",
                self.new.before,
                self.new_nights,
                found,
                self.new,
            )
        ref = self._reference(t) if t > self.start else [self.values[t]]
        state: State = "suspect" if self.suspect else "ok"
        return Assessment(state, statistics.median(ref), len(ref), found, None)


def _step_spread(ref: Sequence[float], alpha: float) -> float:
    """The night-to-night spread of `ref` (four nights at least): the noise a wandering level shows.

    A level that wanders (a random walk, a drift) spreads night to night more than around its
    median: the MAD of the steps between consecutive nights, over sqrt(2) since a step holds two
    nights' noise. Four nights give three steps, the fewest whose median ignores one outlier.

    That sqrt(2) holds when neighbouring nights' noise is independent. Where it alternates (a
    zig-zag: two hosts taking turns, a cache warm every other night), the residuals' lag-1
    autocorrelation r is negative and a step holds the same swing twice in opposite directions: its
    variance is 2 (1 - r) times a night's, up to twice what sqrt(2) assumes, so a step several times
    the nights' own spread around their level would hide in it (issue #40). Steps two nights apart
    compare nights on the same side of the swing: variance 2 (1 - r2), with r2 >= 0 for a zig-zag
    (r^2 for anti-correlated AR(1) noise, 1 for a strict swing), still two nights' noise and still
    widening with a wander, so they take over where the nights alternate. Whether they do is a test
    (as the weekly pattern is), not a cut-off of our own: r below what independent nights reach at
    the rank test's level, r being then about normal with mean -1/n and variance 1/n. One outlier
    leaves r near -1/n, no zig-zag; independent or wandering nights (r near 0 or above) keep the
    consecutive steps as before. Five nights at least, for three steps two apart."""
    n = len(ref)
    lag = 1
    if n >= 5:
        mean = statistics.fmean(ref)
        spread = sum((v - mean) ** 2 for v in ref)
        r = sum((a - mean) * (b - mean) for a, b in itertools.pairwise(ref)) / spread if spread else 0.0
        if r < -1 / n + statistics.NormalDist().inv_cdf(alpha) / math.sqrt(n):
            lag = 2
    steps = [abs(ref[i] - ref[i - lag]) for i in range(lag, n)]
    return statistics.median(steps) * 1.4826 / math.sqrt(2)


def _commits(good: Pins, bad: Pins) -> dict[str, tuple[str | None, str | None]]:
    """Each repository whose pinned commit differs between the two nights: (good, bad)."""
    old, new = dict(good), dict(bad)
    return {
        repo: (old.get(repo), new.get(repo))
        for repo in sorted(old.keys() | new.keys())
        if old.get(repo) != new.get(repo)
    }


def confirms(change: ChangePoint, value: float) -> bool:
    """Whether a re-measurement of the night that confirmed `change` lies in its new regime: nearer
    the new level than the old (the nearer of the two levels; no threshold of its own to choose)."""
    return abs(value - change.after) < abs(value - change.before)


# The weekday test's critical value: chi-square's 0.99 quantile with 6 degrees of freedom (7
# weekdays), so a weekly pattern is assumed at the rank test's level (1 %), not by chance.
CHI2_6_99 = 16.812


def _kruskal_wallis(groups: list[list[float]]) -> float:
    """The Kruskal-Wallis H statistic of `groups` (chi-square with len(groups) - 1 degrees of
    freedom when they share one distribution); ties get their mean rank, and H their correction."""
    values = sorted(v for g in groups for v in g)
    n = len(values)
    first: dict[float, int] = {}
    count: dict[float, int] = {}
    for i, v in enumerate(values):
        first.setdefault(v, i)
        count[v] = count.get(v, 0) + 1
    rank = {v: first[v] + (count[v] + 1) / 2 for v in first}
    total = sum(sum(rank[v] for v in g) ** 2 / len(g) for g in groups)
    h = 12 / (n * (n + 1)) * total - 3 * (n + 1)
    ties = 1 - sum(k**3 - k for k in count.values()) / (n**3 - n)
    return h / ties if ties > 0 else 0.0  # every value equal: no difference between the groups
