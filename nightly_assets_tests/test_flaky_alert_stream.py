"""The broken-test alerts of a flaky-heavy suite replayed night by night through the code the
test_health stage runs (`health.judge` over a 30-night window, infra nights by `infra_nights`,
a broken verdict not broken the night before is a new failure): with the test_suite stage's
confirmation re-runs only the one true break alerts; without them, the same nights' flakes do."""

from __future__ import annotations

import datetime as dt

from benchmarks import flaky_detection
from nightly_assets.stage_kinds.suite_health import SuiteHealthParams
from nightly_assets.testing import health
from nightly_assets.testing.flakiness import Observation, infra_nights
from nightly_assets.warehouse.evidence import Histories

START = dt.date(2026, 6, 1)
NIGHTS = 70
WINDOW = 30  # test_health's default window
SUITE = "pytest_unit"  # a suite that never retries a failure itself
CONFIRM = 2  # confirmation re-runs of a failure
INFRA_NIGHT = 20  # the suite's runner crashes: every test errors
BREAK = ("test_broken", 45, 48)  # broken by a commit on night 45, fixed on night 48


def attempts_of(test: str, night: int) -> str:
    """The attempts the test needed on a night, "P" a pass and "F" a failure, as many as were run
    with confirmation (the first one alone is the night without it)."""
    if night == INFRA_NIGHT:
        return "E"
    if test.startswith("test_flaky_"):
        i = int(test.rsplit("_", 1)[1])
        if night % 23 == i % 23 and night > WINDOW // 2:
            return "FFF"  # one night it fails every attempt: a flake's bad luck, alone
        if (night + i) % 4 == 0:
            return "FP"  # fails the first attempt, passes the confirmation re-run
        return "P"
    if test == "test_very_flaky":  # fails 5 of 11 attempts: two failed nights in a row are its luck
        if night in (40, 41):
            return "FFF"
        return "FP" if night % 2 == 0 else "FFP" if night % 6 == 1 else "P"
    if test.startswith("test_rare_"):
        # A rare flake: its evidence (night 5) ages out of the window before it flakes again.
        i = int(test.rsplit("_", 1)[1])
        return "FP" if night in (5, 50 + i) else "P"
    name, first, end = BREAK
    if test == name and first <= night < end:
        return "FFF"
    return "P"


TESTS = [
    *(f"test_flaky_{i}" for i in range(12)),
    *(f"test_rare_{i}" for i in range(4)),
    "test_very_flaky",
    BREAK[0],
    *(f"test_stable_{i}" for i in range(13)),
]


def observation(night: int, attempts: str, confirmed: bool) -> Observation:
    pins = {"plugin": f"p{night}", "jax": f"j{night // 3}"}  # pins move on most nights
    day = START + dt.timedelta(days=night)
    if attempts == "E":
        return Observation(day, pins, "error")
    if not confirmed:
        return Observation(day, pins, "passed" if attempts[0] == "P" else "failed")
    assert len(attempts) <= 1 + CONFIRM
    return Observation(day, pins, "passed" if attempts[-1] == "P" else "failed", len(attempts))


def replay(confirmed: bool) -> list[tuple[str, int]]:
    """(test, night) of every new-failure alert, night by night."""
    seen = {t: [observation(n, attempts_of(t, n), confirmed) for n in range(NIGHTS)] for t in TESTS}
    tallies = {
        o.night: (len(TESTS), sum(seen[t][n].outcome != "passed" for t in TESTS))
        for n, o in enumerate(seen[TESTS[0]])
    }
    alerts, broken_before = [], set[tuple[str, str]]()
    for night in range(NIGHTS):
        first = max(0, night - WINDOW + 1)
        days = [START + dt.timedelta(days=n) for n in range(first, night + 1)]
        histories = Histories(
            days,
            tests={(SUITE, t): seen[t][first : night + 1] for t in TESTS},
            keys={(SUITE, t): i for i, t in enumerate(TESTS)},
            infra={SUITE: infra_nights({d: tallies[d] for d in days})},
        )
        judged = health.judge(histories, days[-1], clean_nights=None, broken_before=broken_before)
        alerts += [(j.test_id, night) for j in judged if j.new_failure]
        broken_before = {(j.suite, j.test_id) for j in judged if j.verdict.state == "broken"}
    return alerts


def test_with_confirmation_only_the_true_break_alerts_once_on_its_first_night():
    flaky = [t for t in TESTS if t != BREAK[0] and not t.startswith("test_stable")]
    failed_every_attempt = sum(attempts_of(t, n) == "FFF" for t in flaky for n in range(NIGHTS))
    assert failed_every_attempt > 20  # flakes that a confirmation re-run does not tell from a break
    assert sum(attempts_of(t, n) != "P" for t in flaky for n in range(NIGHTS)) > 250
    assert replay(confirmed=True) == [(BREAK[0], BREAK[1])]


def test_without_confirmation_the_break_alerts_a_night_late_and_single_failed_attempts_never():
    alerts = replay(confirmed=False)
    assert (BREAK[0], BREAK[1] + 1) in alerts  # one unconfirmed attempt waits for a second night
    # the rare flakes' single failed nights (their evidence aged out) alert nothing; the very
    # flaky test's failed streaks of two nights on its first nights still look like breakages
    assert {t for t, _ in alerts} == {BREAK[0], "test_very_flaky"}


def test_the_benchmark_and_this_replay_judge_over_the_stages_window():
    assert flaky_detection.WINDOW == WINDOW == SuiteHealthParams.model_fields["nights"].default
