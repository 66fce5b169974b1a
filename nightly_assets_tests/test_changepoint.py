"""The change-point detector on small hand-made series (its scores are in benchmarks/)."""

import datetime as dt

from nightly_assets.benchmarks.changepoint import Point, assess

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
