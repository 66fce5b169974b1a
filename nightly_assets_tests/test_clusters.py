"""Infra clusters: which failures of a suite-night are one infra event, how long an outage may
last, and how a cluster night leaves a test's verdict alone while its own failures still count."""

from __future__ import annotations

import datetime as dt

from nightly_assets.testing.clusters import (
    MIN_CLUSTER,
    MIN_KNOWN_CLUSTER,
    Cluster,
    infra_for,
    is_cluster,
    night_clusters,
    outages,
)
from nightly_assets.testing.flakiness import Observation, classify, failed_with

START = dt.date(2026, 11, 1)
REFUSED = "ConnectionRefusedError: [Errno <n>] Connection refused to <addr>"
LICENCE = "LicenseError: no licence for feature vcs_sim on <addr>"
ASSERT = "AssertionError: assert <n> == <n>"


def day(n: int) -> dt.date:
    return START + dt.timedelta(days=n)


def test_a_known_infra_signature_needs_two_tests_any_other_five_with_words() -> None:
    assert not is_cluster(REFUSED, MIN_KNOWN_CLUSTER - 1)
    assert is_cluster(REFUSED, MIN_KNOWN_CLUSTER)
    assert not is_cluster(LICENCE, MIN_CLUSTER - 1)
    assert is_cluster(LICENCE, MIN_CLUSTER)
    assert not is_cluster(ASSERT, 50)  # independent breakages share it by chance


def test_a_suite_nights_clusters() -> None:
    failures: list[tuple[str, str | None]] = [(f"t{i}", REFUSED) for i in range(3)]
    failures += [(f"u{i}", ASSERT) for i in range(6)] + [("v", "KeyError: 'weight'"), ("w", None)]
    assert night_clusters(failures) == {REFUSED: ("t0", "t1", "t2")}


def test_an_outage_lasting_past_the_limit_is_a_breakage() -> None:
    nights = [day(n) for n in range(6)]
    short = {day(1): {REFUSED}, day(2): {REFUSED}, day(3): {REFUSED}}
    assert outages(short, nights) == short  # over and done: an outage however long
    ongoing = {day(n): {REFUSED} for n in range(2, 6)}
    assert outages(ongoing, nights) == {}  # four nights up to the newest: a breakage
    assert outages(ongoing, nights, max_outage_nights=4) == ongoing
    mixed = {day(4): {REFUSED, LICENCE}, day(5): {REFUSED, LICENCE}, **{day(n): {LICENCE} for n in range(4)}}
    assert outages(mixed, nights) == {day(4): {REFUSED}, day(5): {REFUSED}}


def test_failed_with_counts_a_pass_after_failed_attempts() -> None:
    pins = {"plugin": "p"}
    assert failed_with(Observation(day(0), pins, "failed", signature=REFUSED)) == REFUSED
    assert failed_with(Observation(day(0), pins, "passed", attempts=3, signature=REFUSED)) == REFUSED
    assert failed_with(Observation(day(0), pins, "passed", signature=REFUSED)) is None


def history(
    outcomes: str, signatures: dict[int, str], retried: frozenset[int] = frozenset()
) -> list[Observation]:
    names = {"P": "passed", "F": "failed"}
    return [
        Observation(
            day(n),
            {"plugin": f"p{n}"},
            names[c],
            2 if n in retried else 3 if c == "F" else 1,  # a failure confirmed by two re-runs
            signature=signatures.get(n),
        )
        for n, c in enumerate(outcomes)
    ]


def test_a_cluster_night_is_no_broken_test_and_its_rerun_pass_no_flake() -> None:
    clusters = {day(5): {REFUSED}}
    down = history("PPPPPF", {5: REFUSED})
    assert classify(down).state == "broken"  # what it was without clusters
    assert classify(down, infra=infra_for(down, set(), clusters)).state == "stable"
    back = history("PPPPPP", {5: REFUSED}, retried=frozenset({5}))
    assert classify(back).state == "flaky"  # a same-commit pass after a failure
    assert classify(back, infra=infra_for(back, set(), clusters)).state == "stable"


def test_a_test_failing_with_another_signature_is_judged_on_its_own() -> None:
    clusters = {day(5): {REFUSED}}
    own = history("PPPPPF", {5: "KeyError: 'weight'"})
    assert infra_for(own, set(), clusters) == set()
    assert classify(own, infra=infra_for(own, set(), clusters)).state == "broken"
    # a cluster on the night before leaves tonight's own failure alone: broken since tonight
    both = history("PPPPFF", {4: REFUSED, 5: "KeyError: 'weight'"})
    verdict = classify(both, infra=infra_for(both, {day(1)}, {day(4): {REFUSED}}))
    assert verdict.state == "broken" and verdict.first_bad == day(5) and verdict.last_good == day(3)


def test_a_cluster_names_its_signature_resource_and_tests() -> None:
    cluster = Cluster("db_suite", day(0), REFUSED, tuple(f"t{i}" for i in range(7)), True, "127.0.0.1:5432")
    line = cluster.line()
    assert line.startswith(f"db_suite: 7 tests failed with `{REFUSED}` on 127.0.0.1:5432")
    assert "t0, t1, t2, t3, t4 … 2 more" in line
