"""Tests for nightly_assets.testing.flakiness: hand-written histories of one test, each asserting
the verdict (state, dates, suspects, evidence) the module's rules give."""

from __future__ import annotations

import datetime as dt

import pytest

from nightly_assets.testing.flakiness import (
    Observation,
    Pins,
    Suite,
    classify,
    in_quarantine,
    infra_nights,
    suite_broken,
)

START = dt.date(2026, 11, 1)


def day(n: int) -> dt.date:
    return START + dt.timedelta(days=n)


def history(outcomes: str, *, moving: bool = True, **changes: Observation) -> list[Observation]:
    """One night per letter (P passed, F failed, E error, S skipped), pins moving every night
    (plugin) unless `moving` is false; `changes` replaces night n's observation (key `n<N>`)."""
    names = {"P": "passed", "F": "failed", "E": "error", "S": "skipped"}
    nights = []
    for n, letter in enumerate(outcomes):
        pins = {"plugin": f"p{n if moving else 0}", "jax": "j0"}
        nights.append(changes.get(f"n{n}", Observation(day(n), pins, names[letter])))
    return nights


def at(
    n: int, outcome: str, *, plugin: int | None = None, attempts: int = 1, earlier: tuple[str, ...] = ()
) -> Observation:
    """Night n's observation, the plugin pinned at `p<plugin>` (default: `p<n>`, as `history`)."""
    pins = {"plugin": f"p{n if plugin is None else plugin}", "jax": "j0"}
    return Observation(day(n), pins, outcome, attempts, earlier)


def test_pins_are_a_hashable_mapping_equal_whatever_the_order():
    first, second = Pins({"jax": "a", "plugin": "b"}), Pins([("plugin", "b"), ("jax", "a")])
    assert first == second == {"jax": "a", "plugin": "b"}
    assert hash(first) == hash(second)
    assert list(first) == ["jax", "plugin"]
    assert isinstance(Observation(day(0), {"jax": "a"}, "passed").pins, Pins)


def test_a_pass_after_a_retry_is_flaky():
    verdict = classify(history("PPPPP", n2=at(2, "passed", attempts=3)))
    assert verdict.state == "flaky"
    assert verdict.reason == "passed on retry on 2026-11-03"
    assert verdict.flaky_evidence == 1
    assert (verdict.first_bad, verdict.last_good, verdict.suspects) == (None, None, {})
    assert verdict.pass_rate == 1.0


def test_a_re_run_that_disagrees_is_flaky_either_way_round():
    passed_on_rerun = classify(history("PPPPP", n3=at(3, "passed", earlier=("failed",))))
    assert passed_on_rerun.state == "flaky"
    assert passed_on_rerun.reason == "re-runs disagreed on 2026-11-04"
    assert passed_on_rerun.pass_rate == 5 / 6
    # The newest night's re-run failed after a pass: no night failed every run, so not broken.
    failed_on_rerun = classify(history("PPPPP", n4=at(4, "failed", earlier=("passed",))))
    assert failed_on_rerun.state == "flaky"
    assert failed_on_rerun.first_bad is None


def test_a_flip_with_identical_pins_is_flaky_and_with_moved_pins_one_blip_is_not():
    same_pins = history("PPFPP", n2=at(2, "failed", plugin=1))
    verdict = classify(same_pins)
    assert verdict.state == "flaky"
    assert verdict.reason == "flipped with unchanged commits 2026-11-02→03"
    assert verdict.flaky_evidence == 1
    moved = classify(history("PPFPP"))
    assert moved.state == "stable"
    assert moved.flaky_evidence == 1
    assert "failed single night 2026-11-03 (one is not flaky)" in moved.reason
    assert classify(history("PFPPFP")).state == "flaky"  # two blips
    assert "failed single nights 2026-11-02, 2026-11-05" in classify(history("PFPPFP")).reason


def test_failing_every_attempt_from_a_night_with_a_changed_pin_is_broken_with_that_repo_as_suspect():
    nights = [
        at(0, "passed", plugin=0),
        at(1, "passed", plugin=0),
        at(2, "skipped", plugin=0),
        at(3, "failed", plugin=1, attempts=3),  # plugin moved since the last good night; jax did not
        at(4, "failed", plugin=2, attempts=3),
    ]
    verdict = classify(nights)
    assert verdict.state == "broken"
    assert (verdict.first_bad, verdict.last_good) == (day(3), day(1))
    assert verdict.suspects == {"plugin": ("p0", "p1")}
    assert verdict.reason.startswith(
        "failed every attempt on 2 nights since 2026-11-04; last passed 2026-11-02"
    )
    assert verdict.flaky_evidence == 0
    assert verdict.pass_rate == 0.5


def test_a_new_failure_tonight_is_broken_and_a_repo_added_that_night_is_a_suspect():
    tonight = Observation(day(4), {"plugin": "p4", "jax": "j0", "xla": "x1"}, "error", attempts=3)
    verdict = classify([*history("PPPP"), tonight])
    assert verdict.state == "broken"
    assert (verdict.first_bad, verdict.last_good) == (day(4), day(3))
    assert verdict.suspects == {"plugin": ("p3", "p4"), "xla": (None, "x1")}


def test_a_flaky_test_failing_is_flaky_while_its_failure_rate_explains_the_streak_then_broken():
    flaky_past = {"n1": at(1, "passed", attempts=2)}  # 1 failed attempt of 5 before: 2/7 by Laplace
    one_night = classify(history("PPPPF", **flaky_past))
    assert one_night.state == "flaky"
    assert one_night.reason.startswith(
        "failed every attempt on 2026-11-05 (1 attempt, 28.6% by chance), a flaky test's failure"
    )
    # Unconfirmed failures (one attempt a night) on a short history: the threshold is 1 % over
    # the usable nights, and a rate known from five attempts is held with its doubt (each failed
    # attempt of the streak counts before the next): 2/7 * 3/8 * ... * 13/18 = 0.070 % > 1 % / 16
    # nights after 12 failed nights, 0.052 % <= 1 % / 17 nights after 13 (at a fixed 2/7 a night,
    # six nights would have done).
    assert classify(history("PPPPFF", **flaky_past)).state == "flaky"
    assert classify(history("PPPP" + "F" * 12, **flaky_past)).state == "flaky"
    six_nights = classify(history("PPPP" + "F" * 13, **flaky_past))
    assert six_nights.state == "broken"
    assert (six_nights.first_bad, six_nights.last_good) == (day(4), day(3))
    assert six_nights.suspects == {"plugin": ("p3", "p4")}
    assert six_nights.flaky_evidence == 1
    assert six_nights.reason.endswith("flaky before (1 piece of evidence)")


def test_confirmation_re_runs_that_all_fail_make_a_rarely_flaky_test_broken_by_the_second_night():
    rare = {"n1": at(1, "passed", attempts=2)}  # 1 failed attempt of 30 before: 2/32 by Laplace
    # 2/32 * 3/33 * 4/34 = 0.067 % > 1 % / 30 nights: one night's three attempts leave it flaky
    # (a rate known from 30 attempts may be twice the 1 in 30 seen), the next night's break it.
    confirmed = classify(history("P" * 29 + "F", **rare, n29=at(29, "failed", attempts=3)))
    assert confirmed.state == "flaky"
    second = classify(
        history("P" * 29 + "FF", **rare, n29=at(29, "failed", attempts=3), n30=at(30, "failed", attempts=3))
    )
    assert second.state == "broken"
    assert second.first_bad == day(29)
    assert classify(history("P" * 29 + "F", **rare)).state == "flaky"  # one attempt: 1/16 is its luck
    # A test failing about a third of its attempts (4 of 12) fails three in a row one night in
    # twenty: flaky, and two or three such nights in a row too (0.14 % > 1 % / 11 nights), four
    # are broken.
    half = {f"n{n}": at(n, "passed", attempts=2) for n in range(0, 8, 2)}
    for nights, state in ((1, "flaky"), (3, "flaky"), (4, "broken")):
        failed = {f"n{8 + n}": at(8 + n, "failed", attempts=3) for n in range(nights)}
        assert classify(history("P" * 8 + "F" * nights, **half, **failed)).state == state, nights


def test_a_pass_on_a_confirmation_re_run_is_same_commit_flaky_evidence():
    verdict = classify(history("PPPPP", n4=at(4, "passed", attempts=3)))
    assert verdict.state == "flaky"
    assert verdict.reason == "passed on retry on 2026-11-05"
    assert not in_quarantine(history("PPPPP", n4=at(4, "passed", attempts=3)), clean_nights=0)


def test_a_failure_with_unchanged_pins_is_a_flake_for_one_night_and_broken_for_two():
    assert classify(history("PPPPF", moving=False)).state == "flaky"
    verdict = classify(history("PPPFF", moving=False))
    assert verdict.state == "broken"
    assert verdict.suspects == {}
    assert "no pinned commit changed" in verdict.reason


def test_infra_nights_are_no_evidence_and_neither_start_nor_break_a_streak():
    confirmed = {"n4": at(4, "error", attempts=3)}
    assert classify(history("PPPPE", **confirmed)).state == "broken"
    assert classify(history("PPPPE", **confirmed), infra={day(4)}).state == "stable"
    assert classify(history("PPFPP", moving=False), infra={day(2)}).state == "stable"
    streak = classify(history("PPFPF"), infra={day(3)})
    assert streak.state == "broken"
    assert (streak.first_bad, streak.last_good) == (day(2), day(1))


def test_infra_nights_are_wholesale_failures_but_not_a_breakage_still_going():
    tallies = {day(0): (100, 1), day(1): (100, 90), day(2): (100, 2), day(3): (0, 0), day(4): (100, 0)}
    assert infra_nights(tallies) == {day(1), day(3)}
    assert infra_nights(tallies, share=0.95) == {day(3)}
    broken_suite = {day(n): (100, 0 if n < 2 else 100) for n in range(6)}
    assert infra_nights(broken_suite) == set()  # 4 nights and going: a commit broke the suite
    assert infra_nights(broken_suite, max_outage_nights=4) == {day(n) for n in range(2, 6)}


def test_quarantine_lasts_until_enough_consecutive_clean_nights():
    flaky = {"n1": at(1, "passed", attempts=2)}
    assert in_quarantine(history("PP", **flaky), clean_nights=3)
    assert in_quarantine(history("PPPP", **flaky), clean_nights=3)
    assert not in_quarantine(history("PPPPP", **flaky), clean_nights=3)
    # a re-run disagreeing restarts the count; a known-flaky test's failure tonight counts too
    rerun = {**flaky, "n4": at(4, "passed", earlier=("failed",))}
    assert in_quarantine(history("PPPPPPP", **rerun), clean_nights=3)
    assert not in_quarantine(history("PPPPPPPP", **rerun), clean_nights=3)
    assert in_quarantine(history("PPPPPF", **flaky), clean_nights=3)
    # never a stable or broken test
    assert not in_quarantine(history("PPPPP"), clean_nights=3)
    confirmed = {f"n{n}": at(n, "failed", attempts=3) for n in (5, 6, 7)}
    assert classify(history("PPPPPFFF", **flaky, **confirmed)).state == "broken"
    assert not in_quarantine(history("PPPPPFFF", **flaky, **confirmed), clean_nights=3)
    assert in_quarantine(history("PPPPPFF", **flaky), clean_nights=3)  # unconfirmed: still its flakes


def test_too_few_usable_nights_is_insufficient_unless_the_evidence_needs_no_history():
    two = classify(history("PP"))
    assert two.state == "insufficient"
    assert two.reason == "2 usable nights, 3 needed"
    assert classify(history("F")).reason == "1 usable night, 3 needed"
    skipped = classify(history("PSSPS"))
    assert skipped.state == "insufficient"
    assert skipped.reason == "2 usable nights, 3 needed; 3 infra or skipped left out"
    assert classify(history("PPP", n1=at(1, "collected"))).state == "insufficient"  # collect-only
    assert classify(history("")).pass_rate is None
    assert classify(history("FF")).state == "insufficient"  # never passed, too new to say broken
    never_passed = classify(history("FFF"))
    assert never_passed.state == "broken"
    assert (never_passed.first_bad, never_passed.last_good, never_passed.suspects) == (day(0), None, {})
    since_a_pass = classify(history("PF", n1=at(1, "failed", attempts=3)))  # confirmed: no more needed
    assert since_a_pass.state == "broken"
    assert since_a_pass.suspects == {"plugin": ("p0", "p1")}
    assert classify(history("PF")).state == "insufficient"  # one attempt: a second night decides
    assert classify(history("P", n0=at(0, "passed", attempts=2))).state == "flaky"


def confirmed(codes: str) -> list[Observation]:
    """One night per letter with confirmation (three attempts in all): P passed on the first
    attempt, 2 or 3 passed on that attempt, F failed all three; pins moving every night."""
    nights = []
    for n, code in enumerate(codes):
        pins = {"plugin": f"p{n}", "jax": "j0"}
        if code == "F":
            nights.append(Observation(day(n), pins, "failed", attempts=3))
        else:
            nights.append(Observation(day(n), pins, "passed", attempts=1 if code == "P" else int(code)))
    return nights


# A flaky test failing one attempt in six over 24 nights (passed on a retry every sixth night).
KNOWN_FLAKY = "PPP2PPPPP2PPPPP2PPPPP2PP"
BURST_WEEK = "F3FF2FF"  # then a week failing 18 of its 20 attempts (90 %)


def test_a_known_flaky_test_failing_90_percent_for_a_week_is_flakier_once_and_never_broken():
    codes = KNOWN_FLAKY + BURST_WEEK
    verdicts = [classify(confirmed(codes[: n + 1])) for n in range(len(KNOWN_FLAKY), len(codes))]
    assert [v.state for v in verdicts] == ["flaky"] * len(BURST_WEEK)
    since = [v.flakier_since for v in verdicts]
    assert since == [None, None, day(24), day(24), day(24), day(24), day(24)]  # once, and it stays
    tonight = verdicts[-1]
    assert tonight.reason.startswith(
        "failed every attempt on 2 nights since 2026-11-30 (6 attempts, 0.5% by chance), a flaky"
        " test's failure; flakier since 2026-11-25: failed 86% of its attempts since, 17% before"
    )
    assert (tonight.burst_rate, tonight.rate_before) == (pytest.approx(19 / 22), pytest.approx(5 / 30))
    # A burst that starts with a failed streak is a breakage until the test passes again:
    # (5/30)^6 = 0.002 % <= 1 % / 26 nights; the night it passes, it is flakier since the streak.
    assert classify(confirmed(KNOWN_FLAKY + "FF")).state == "broken"
    passed_again = classify(confirmed(KNOWN_FLAKY + "FF3"))
    assert (passed_again.state, passed_again.flakier_since) == ("flaky", day(24))


def test_a_flaky_test_in_a_burst_is_broken_once_its_failures_stop_passing_for_long_enough():
    # At its rate in the burst before the streak (F3FF2: 12 of 14 attempts failed, 13/16 by
    # Laplace), 13 nights of three failed attempts are a flaky test's failure, 0.8125^39 = 0.030 %
    # > 1 % / 42 nights; 14 are broken, 0.8125^42 = 0.016 % <= 1 % / 43 nights. At its rate
    # before the burst (1/6) two nights would have been broken.
    codes = KNOWN_FLAKY + BURST_WEEK[:5]
    thirteen = classify(confirmed(codes + "F" * 13))
    assert thirteen.state == "flaky"
    assert thirteen.flakier_since == day(24)
    assert thirteen.reason.startswith(
        "failed every attempt on 13 nights since 2026-11-30 (39 attempts, 0.0% by chance at its rate"
        " since 2026-11-25), a flaky test's failure; flakier since 2026-11-25"
    )
    fourteen = classify(confirmed(codes + "F" * 14))
    assert fourteen.state == "broken"
    assert (fourteen.first_bad, fourteen.last_good) == (day(29), day(28))
    assert fourteen.flakier_since is None


def test_a_test_with_no_flaky_history_failing_a_week_is_broken_from_its_first_night():
    for nights in range(1, 8):
        verdict = classify(confirmed("P" * 24 + "F" * nights))
        assert verdict.state == "broken", nights
        assert (verdict.first_bad, verdict.last_good) == (day(24), day(23))
        assert verdict.flakier_since is None


def test_one_unconfirmed_attempt_is_no_verdict_until_the_test_fails_again():
    """A failure nothing re-ran (no retry, no confirmation: over confirm.max_tests, or a runner
    that cannot re-run) may be a flake of a test not known to be flaky yet."""
    once = classify(history("PPPPF"))
    assert once.state == "insufficient"
    assert once.reason == "failed its one attempt on 2026-11-05, not re-run: broken if it fails again"
    twice = classify(history("PPPPFF"))
    assert twice.state == "broken"
    assert (twice.first_bad, twice.last_good) == (day(4), day(3))


def test_two_failed_stretches_that_recovered_make_a_test_flaky_whatever_their_length():
    """Each recovery needs a fix, and a test fixed twice in the window fails more often than
    commits break it: two stretches, single nights or longer, are flaky as two blips are."""
    assert classify(history("PPFFPPPP")).state == "stable"  # one breakage, fixed
    twice = classify(history("PPFFPPFFFPP"))
    assert twice.state == "flaky"
    assert twice.reason == "failed single nights 2026-11-03→04, 2026-11-07→09"
    assert classify(history("PFPPFFPP")).state == "flaky"  # a blip and a longer stretch


def test_a_known_flaky_test_failing_with_its_own_flake_is_flakier_until_min_nights():
    """A streak failing with the signature of the test's earlier flakes may be a burst: flakier
    since its first night, and broken only once it has lasted min_nights (three) nights."""
    flake = "AssertionError: cache miss after load: <n> vs <n>"
    other = "KeyError: 'weight'"

    def obs(n: int, outcome: str, attempts: int = 5, sig: str | None = flake) -> Observation:
        return Observation(day(n), {"plugin": f"p{n}"}, outcome, attempts, signature=sig)

    # 20 nights, two of them passed on a retry after failing with the flake (2 of 22 attempts)
    past = [obs(n, "passed", 2) if n in (3, 6) else obs(n, "passed", 1, None) for n in range(20)]
    two = classify([*past, obs(20, "failed"), obs(21, "failed")])
    assert two.state == "flaky"
    assert two.flakier_since == day(20)
    assert two.reason.startswith("failed every attempt on 2 nights since 2026-11-21 (10 attempts")
    assert f"failing with its known flake `{flake}`, broken at 3 nights" in two.reason
    three = classify([*past, obs(20, "failed"), obs(21, "failed"), obs(22, "failed")])
    assert three.state == "broken" and three.first_bad == day(20)
    # another signature is the test's own new failure: judged by its rate (broken on its first night)
    assert classify([*past, obs(20, "failed", sig=other)]).state == "broken"
    # a bare comparison of values tells nothing: no flake is known by it
    bare = "AssertionError: assert <n> == <n>"
    generic = [obs(n, "passed", 2, bare) if n in (3, 6) else o for n, o in enumerate(past)]
    assert classify([*generic, obs(20, "failed", sig=bare)]).state == "broken"
    # a test whose flake is too rare to show in the window: clean for 20 nights, it fails every
    # attempt with a message it failed with months ago (`flakes`, the warehouse's memory), held
    # as that flake until the streak has lasted three nights
    clean = [obs(n, "passed", 1, None) for n in range(20)]
    assert classify([*clean, obs(20, "failed")]).state == "broken"
    held = classify([*clean, obs(20, "failed")], flakes={flake})
    assert held.state == "insufficient" and held.reason.startswith(f"failing with `{flake}` since {day(20)}")
    assert classify([*clean, obs(20, "failed", sig=other)], flakes={flake}).state == "broken"
    assert classify([*clean, *(obs(20 + i, "failed") for i in range(3))], flakes={flake}).state == "broken"


def test_a_failure_with_no_flaky_evidence_is_weighed_against_the_suites_flaky_tests():
    suite = Suite(tests=100, flaky_rates=(0.5,) * 20)
    new = history("PPF", n2=at(2, "failed", attempts=3))
    assert classify(new).state == "broken"
    # 20 tests at 50 % that passed twice explain a test passing twice, then failing three in a row:
    # 20 * 0.25 * 0.125 / (80 + 20 * 0.25) = 0.74 % > 1 % / 3 nights
    held = classify(new, suite=suite)
    assert held.state == "insufficient"
    assert held.reason.startswith("failed every attempt since 2026-11-03 (3 attempts), no flaky evidence")
    assert "0.7% chance" in held.reason
    # a second failed night (0.09 %), or thirty clean attempts before (none of its flaky tests
    # passes thirty in a row), leave the suite nothing to explain it with: broken
    second = history("PPFF", n2=at(2, "failed", attempts=3), n3=at(3, "failed", attempts=3))
    assert classify(second, suite=suite).state == "broken"
    long = history("P" * 30 + "F", n30=at(30, "failed", attempts=3))
    assert classify(long, suite=suite).state == "broken"
    # judged alike with nine others failing tonight, the 1 % is spread over the ten: the second
    # night's 0.09 % > 1 % / (4 nights * 10) holds it one more night
    crowded = Suite(tests=100, flaky_rates=(0.5,) * 20, judged=10)
    assert classify(second, suite=crowded).state == "insufficient"
    assert classify(new, suite=Suite(100)).state == "broken"  # a suite with no flaky test
    # four flaky tests are theirs, not a rate the suite's others share
    assert classify(new, suite=Suite(tests=10, flaky_rates=(0.5,) * 4)).state == "broken"


def test_a_flaky_test_of_a_suite_broken_wholesale_is_broken_with_the_rest():
    # the suite failed wholesale for five nights up to tonight: more than an outage (three), so
    # its nights are a breakage of the whole suite, and a flaky test failing with it is broken too
    tallies = {day(n): (20, 20 if n >= 5 else 0) for n in range(10)}
    assert suite_broken(tallies) == {day(n) for n in range(5, 10)}
    assert suite_broken({**tallies, day(10): (20, 0)}) == set()  # it passed again: over
    assert suite_broken({d: t for d, t in tallies.items() if d < day(8)}) == set()  # three: an outage
    half = {f"n{n}": at(n, "passed", attempts=2) for n in range(0, 5, 2)}  # failing about half
    streak = history("PPPPP" + "FFFFF", **half)
    assert classify(streak).state == "flaky"  # five single attempts: its flakiness explains them
    broken = classify(streak, suite_wide=suite_broken(tallies))
    assert (broken.state, broken.first_bad) == ("broken", day(5))
    assert broken.reason.endswith("its whole suite failed with it each night")
    # failing by its own flake the night before the suite broke: broken with the suite from the
    # suite's first night, whose commits are the suspects (not the flake's night)
    retried = {f"n{n}": at(n, "passed", attempts=2) for n in (0, 2)}
    early = classify(history("PPPP" + "FFFFFF", **retried), suite_wide=suite_broken(tallies))
    assert (early.state, early.first_bad, early.last_good) == ("broken", day(5), day(4))
    assert "its suite last passed " + str(day(4)) in early.reason
    assert classify(history("PPPP" + "FFFFFF", **retried)).state == "flaky"


def test_a_flaky_tests_streak_is_judged_alike_with_the_suites_other_flaky_failures_tonight():
    # 4 of 12 attempts failed before, then four nights of three failed attempts: 0.035 % by
    # chance, broken alone (<= 1 % / 12 nights), but with two more known-flaky tests failing
    # tonight in its suite the 1 % is spread over the three (0.028 %): one more night
    half = {f"n{n}": at(n, "passed", attempts=2) for n in range(0, 8, 2)}
    failed = {f"n{8 + n}": at(8 + n, "failed", attempts=3) for n in range(5)}
    four = history("P" * 8 + "F" * 4, **half, **{k: v for k, v in failed.items() if k != "n12"})
    assert classify(four).state == "broken"
    assert classify(four, suite=Suite(tests=100, flaky_failing=3)).state == "flaky"
    assert (
        classify(history("P" * 8 + "F" * 5, **half, **failed), suite=Suite(100, flaky_failing=3)).state
        == "broken"
    )


def test_a_flaky_tests_streak_with_a_message_it_never_flaked_with_is_broken_sooner():
    flake, breakage = "TimeoutError: queue drained after <n> s", "KeyError: 'weights' in load_checkpoint"

    def night(n: int, outcome: str, sig: str | None, attempts: int = 1) -> Observation:
        return Observation(day(n), {"plugin": f"p{n}"}, outcome, attempts, signature=sig)

    def flaky_then(streak_sigs: list[str], flakes: list[str] | None = None) -> list[Observation]:
        sigs = iter(flakes or [flake] * 10)  # ten nights passed on a retry after failing with it
        before = [
            night(n, "passed", next(sigs), 2) if n % 2 == 0 else night(n, "passed", None) for n in range(20)
        ]
        return before + [night(20 + i, "failed", sig) for i, sig in enumerate(streak_sigs)]

    # three single failed attempts at its rate of about a third: 5 % by chance, flaky
    assert classify(flaky_then([flake] * 3)).state == "flaky"
    # the same three with a message its ten flakes never gave: (1/11)(2/12)(3/13) more, broken
    broken = classify(flaky_then([breakage] * 3))
    assert (broken.state, broken.first_bad) == ("broken", day(20))
    assert broken.reason.endswith(f"failing with `{breakage}`, never its flake")
    assert classify(flaky_then([breakage] * 2)).state == "flaky"  # two nights: 0.17 % > 0.01/22
    # a test whose flakes each gave a message of their own gives a new one as often
    varied = [f"RuntimeError: worker {name} lost" for name in "abcdefghij"]
    assert classify(flaky_then([breakage] * 3, varied)).state == "flaky"
    # one night of the streak with its known flake: its flakiness may explain it all
    assert classify(flaky_then([breakage, flake, breakage])).state == "flaky"
