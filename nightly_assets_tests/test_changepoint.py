"""The change-point detector on small hand-made series (its scores are in benchmarks/)."""

import datetime as dt
import itertools
import random
import statistics

import pytest

from nightly_assets.perf.changepoint import (
    Point,
    Replay,
    Settings,
    _kruskal_wallis,
    _step_spread,
    assess,
    confirms,
)

START = dt.date(2026, 10, 1)
NOISE = [0.0, 0.004, -0.003, 0.002, -0.001, 0.003, -0.004, 0.001, -0.002, 0.0, 0.002, -0.003]


def night(i: int) -> dt.date:
    return START + dt.timedelta(days=i)


def series(values: list[float], pins: list[dict[str, str]] | None = None) -> list[Point]:
    return [Point.of(night(i), v, pins[i] if pins else None) for i, v in enumerate(values)]


def stable(n: int, level: float = 100.0) -> list[float]:
    return [level * (1 + NOISE[i % len(NOISE)]) for i in range(n)]


def test_below_the_minimum_history_there_is_no_verdict_whatever_the_values() -> None:
    verdict = assess(series([100.0, 101.0, 300.0, 310.0]), lower_is_better=True)
    assert verdict.state == "insufficient data"
    assert verdict.new is None and verdict.change_points == ()


def test_a_step_alerts_once_naming_the_first_bad_night_and_the_commits_since_the_last_good() -> None:
    values = [*stable(12), 110.0, 110.5, 109.8, 110.2, 110.1]
    pins = [{"jax": f"j{i}", "plugin": "p0" if i < 12 else "p1"} for i in range(len(values))]
    confirmed_on = [
        i for i in range(1, len(values) + 1) if assess(series(values[:i], pins[:i]), lower_is_better=True).new
    ]
    assert confirmed_on == [14]  # the second night at the new level, once
    verdict = assess(series(values[:14], pins[:14]), lower_is_better=True)
    change = verdict.new
    assert verdict.state == "regressed" and change is not None and change.worse
    assert (change.last_good, change.first_bad, change.confirmed) == (night(11), night(12), night(13))
    assert change.commits == {"jax": ("j11", "j12"), "plugin": ("p0", "p1")}
    assert 0.09 < change.change < 0.11
    assert change.describe("s").startswith("regressed 10.2% from 2026-10-13 on (100 s → 110.2 s;")
    later = assess(series(values, pins), lower_is_better=True)
    assert later.state == "ok" and later.new is None and len(later.change_points) == 1
    assert later.baseline is not None and abs(later.baseline - 110.0) < 1


def test_one_outlier_never_alerts() -> None:
    values = [*stable(12), 160.0, *stable(6)]
    found = [assess(series(values[:i]), lower_is_better=True) for i in range(1, len(values) + 1)]
    assert all(v.new is None for v in found)
    assert found[12].state == "suspect"  # the outlier's own night: worse, not yet a change


def test_direction_comes_from_the_benchmark_a_throughput_drop_regresses_a_rise_improves() -> None:
    drop = [*stable(10), 90.0, 90.3, 89.9]
    rise = [*stable(10), 110.0, 110.3, 109.9]
    assert (v := assess(series(drop), lower_is_better=False).change_points) and v[0].worse
    improved = assess(series(rise[:12]), lower_is_better=False)
    assert improved.state == "improved" and improved.new is not None and not improved.new.worse
    assert assess(series(drop), lower_is_better=True).change_points[0].worse is False


def test_a_slow_drift_alerts_once() -> None:
    values = stable(10) + [100.0 + 2.0 * (i + 1) for i in range(8)] + [116.0] * 6
    worse = [c for c in assess(series(values), lower_is_better=True).change_points if c.worse]
    assert len(worse) == 1
    assert night(10) <= worse[0].first_bad <= night(14)


def test_nights_with_the_same_commits_count_once_in_the_baseline() -> None:
    """Six nights re-measuring one commit at 110 do not outvote four commits at 100."""
    values = [100.0, 100.2, 99.9, 100.1, 110.0, 110.1, 109.9, 110.0, 110.2, 109.8]
    pins = [{"app": f"a{i}"} for i in range(4)] + [{"app": "a4"}] * 6
    verdict = assess(series([*values, 100.0], [*pins, {"app": "a5"}]), lower_is_better=True)
    assert verdict.baseline is not None and verdict.baseline < 101
    without_pins = assess(series([*values, 100.0]), lower_is_better=True)
    assert without_pins.baseline is not None and without_pins.baseline > 109


def test_a_second_step_after_the_level_settled_alerts_again() -> None:
    """100 -> 110 alerts; 125 eight nights later is a second regression, not the first one still
    under way (a drift is merged; a level that held is not)."""
    values = [*stable(30), *stable(8, 110.0), *stable(5, 125.0)]
    worse = [c for c in assess(series(values), lower_is_better=True).change_points if c.worse]
    assert [c.first_bad for c in worse] == [night(30), night(38)]
    assert round(worse[1].before) == 110 and round(worse[1].after) == 125


def weekly(n: int, swing: float, step_at: int | None = None, step: float = 0.0) -> list[float]:
    """Nights whose Saturday and Sunday run `swing` slower (a busier weekend cluster), with a step
    of `step` from night `step_at` on. START is a Thursday: nights 2 and 3 are the first weekend."""
    values = []
    for i in range(n):
        weekend = night(i).weekday() >= 5
        level = 100.0 * (1 + step if step_at is not None and i >= step_at else 1.0)
        values.append(level * (1 + (swing if weekend else 0.0)) * (1 + NOISE[i % len(NOISE)]))
    return values


def test_a_weekly_swing_neither_alerts_nor_hides_a_step() -> None:
    assert night(2).weekday() == 5
    swing = weekly(70, 0.08)
    assert [c for c in assess(series(swing), lower_is_better=True).change_points if c.worse] == []
    # A 6 % regression on a Monday after ten weeks: the weekday offsets make it stand out.
    stepped = weekly(80, 0.08, step_at=74, step=0.06)
    assert night(74).weekday() == 0
    worse = [c for c in assess(series(stepped), lower_is_better=True).change_points if c.worse]
    assert [c.first_bad for c in worse] == [night(74)] and worse[0].confirmed <= night(76)
    # Without looking for a weekly pattern the weekend before the step is taken for its start.
    blind = assess(series(stepped), lower_is_better=True, settings=Settings(season_window=0))
    assert [c.first_bad for c in blind.change_points if c.worse] == [night(72)]


def test_the_weekday_test_statistic() -> None:
    # Ranks 1, 2 | 3, 4: H = 12 / (4 * 5) * (3**2 / 2 + 7**2 / 2) - 3 * 5 = 2.4.
    assert _kruskal_wallis([[1.0, 2.0], [3.0, 4.0]]) == pytest.approx(2.4)
    # Tied values share a rank and H is corrected for them (as scipy.stats.kruskal does).
    tied = [[1.0, 2.0], [2.0, 3.0], [3.0, 3.0], [1.0, 1.0], [5.0, 5.0], [4.0, 2.0], [6.0, 6.0]]
    assert _kruskal_wallis(tied) == pytest.approx(11.7324263)
    assert _kruskal_wallis([[1.0, 1.0], [1.0, 1.0]]) == 0.0


def test_a_remeasurement_that_lies_at_the_old_level_withdraws_the_change() -> None:
    values = [*stable(12), 113.0, 113.5]  # nights 12 and 13 would confirm a 13 % regression
    replay = Replay(lower_is_better=True)
    changes = [replay.add(p) for p in series(values)]
    change = changes[-1]
    assert change is not None and change.worse and changes[:-1] == [None] * 13
    assert confirms(change, 112.0) and not confirms(change, 101.0)
    assert replay.remeasured(101.0) is None  # tonight measured again: the old level
    assert replay.found == [] and replay.assessment().state == "ok"
    # Nights 14 and 15 at the new level: a change again, from the first night after the one
    # the re-measurement put back at the old level.
    assert replay.add(Point.of(night(14), 113.2)) is None
    later = replay.add(Point.of(night(15), 113.1))
    assert later is not None and (later.first_bad, later.confirmed) == (night(14), night(15))
    assert assess(series(values), lower_is_better=True).new == change  # what a replay finds anew


def test_a_wandering_level_is_wider_noise_not_a_change() -> None:
    """A random walk (1.2 % a night, 0.3 % measurement noise): its climb to 105.7 and 108.6 on
    nights 7 and 8 is a few of its own steps, which the night-to-night spread shows; measured
    against the spread around its median alone, it is a change."""
    walk = [
        *(102.0, 102.3, 99.6, 101.4, 101.0, 104.9, 106.7, 105.7, 108.6, 108.2, 106.9, 105.0, 103.4),
        *(102.4, 101.5, 100.5, 102.0, 101.0, 100.8, 100.1, 100.4, 104.5, 105.7, 106.6, 105.7, 104.0),
        *(103.8, 105.0, 105.4, 104.1, 104.6, 106.4, 105.5, 104.7, 103.8, 102.5, 102.9, 102.1, 103.2),
    ]
    assert [c for c in assess(series(walk), lower_is_better=True).change_points if c.worse] == []
    spread_ignored = assess(series(walk), lower_is_better=True, settings=Settings(step_noise=False))
    assert [c.first_bad for c in spread_ignored.change_points if c.worse] == [night(7)]


def zigzag(n: int, level: float, swing: float, step_at: int | None = None, to: float = 0.0) -> list[float]:
    """Nights that alternate `swing` above and below `level` (two hosts taking turns), with a little
    noise of their own, moving to the level `to` from night `step_at` on."""
    return [
        (to if step_at is not None and i >= step_at else level)
        + swing * (-1) ** i
        + 5 * NOISE[i % len(NOISE)]
        for i in range(n)
    ]


def test_a_clear_step_under_zigzag_noise_is_found_on_its_night() -> None:
    """Issue #40: a level of 0.9 whose nights alternate 0.2 and 1.6 steps to 4 on night 30, over four
    times the swing. Consecutive nights differ by twice the swing, so their spread (over sqrt 2) made
    the noise 1.5 and hid the step; nights two apart, on the same side of the swing, do not."""
    values = zigzag(40, 0.9, 0.7, step_at=30, to=4.0)
    worse = [c for c in assess(series(values), lower_is_better=True).change_points if c.worse]
    assert [c.first_bad for c in worse] == [night(30)] and worse[0].confirmed <= night(32)
    # The new level: the median of the nights that confirmed it, each on one side of the swing.
    assert 0.8 < worse[0].before < 1.0 and 4.0 - 0.8 < worse[0].after < 4.0 + 0.8
    # A throughput falling from 4 to 0.9 under the same swing: a regression the other way.
    drop = zigzag(40, 4.0, 0.7, step_at=30, to=0.9)
    assert [c.first_bad for c in assess(series(drop), lower_is_better=False).change_points] == [night(30)]


def test_a_zigzag_without_a_step_gives_no_change_point() -> None:
    for swing in (0.05, 0.3, 0.7):
        values = zigzag(90, 1.0 + swing, swing)
        for lower_is_better in (True, False):
            assert assess(series(values), lower_is_better=lower_is_better).change_points == ()


def test_the_night_to_night_spread_takes_steps_two_nights_apart_only_where_the_nights_alternate() -> None:
    swing = zigzag(20, 1.0, 0.5)
    consecutive = _step_spread(swing[:4], 0.01)  # too few nights to test: consecutive steps
    assert consecutive == pytest.approx(
        statistics.median(abs(b - a) for a, b in itertools.pairwise(swing[:4])) * 1.4826 / 2**0.5
    )
    assert consecutive > 1.0  # twice the swing a step
    assert _step_spread(swing, 0.01) < 0.1  # two apart: only the nights' own noise
    # Independent nights and a wander keep the consecutive steps: Gaussian noise, and the random
    # walk of test_a_wandering_level_is_wider_noise_not_a_change above (its nights 0 to 19).
    rng = random.Random(40)
    independent = [100.0 + rng.gauss(0, 1) for _ in range(20)]
    walk = [102.0, 102.3, 99.6, 101.4, 101.0, 104.9, 106.7, 105.7, 108.6, 108.2, 106.9, 105.0, 103.4]
    walk += [102.4, 101.5, 100.5, 102.0, 101.0, 100.8, 100.1]
    for nights in (independent, walk):
        steps = [abs(b - a) for a, b in itertools.pairwise(nights)]
        assert _step_spread(nights, 0.01) == pytest.approx(statistics.median(steps) * 1.4826 / 2**0.5)
