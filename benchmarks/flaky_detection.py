"""Flaky and broken test detection (`nightly_assets.testing.flakiness`) scored on a simulated,
seeded history against its truth table, beside a naive baseline scored on the same history.

The history: NIGHTS (60) nights of six suites, about 3,000 tests. Three repositories are pinned
each night; each moves with its own chance (plugin 50 %, jax 40 %, xla 20 %) and always on the
nights of the breaking and fixing commits, so that on a few nights none moves. The Bazel suites
give a failed test up to 3 attempts, the Surefire one 2, the pytest ones 1. Tests are stable,
flaky (each attempt passes with a chance drawn from 50-99 %), broken by a commit on some night
and broken still (a third of them flaky before; one breaking commit lands on the newest night),
or broken then fixed by a later commit (a third of them flaky). The small `smoke` suite is
broken wholesale by a commit six nights before the end. About 3 % of suite-nights are infra
failures (90 % of the suite errors, the rest ran before the crash), plus a two-night outage of
`bazel_gpu`; half the nights with an infra failure and 8 % of the others are re-run, and re-runs
never fail on infra. 8 % of tests are skipped on 30 % of nights; 0.5 % always are and 1 % are
new (two nights old).

As the warehouse reader would, the benchmark finds each suite's infra nights with `infra_nights`
on the tallies of the nights' first runs and of their last runs: a night's observation is its
last run, and a re-run night's first run enters `earlier` only when it was no infra failure.
Then it classifies every test at the newest night. (An infra night inside smoke's breakage is
not told apart from it: the tests fail either way.)

Scoring. Truth flaky: a flaky test not broken at the newest night. Precision is over every test
called flaky. Recall's denominator is the flaky tests that had a chance to show it: a failed
attempt the warehouse keeps (the last run's attempts and outcome, an earlier run's outcome) on
a run that was no infra failure, outside the test's broken nights; a flaky test that never
failed in the window looks exactly stable. Recall over all flaky tests is printed too. Truth
broken: failing every attempt from its breaking night through the newest night; scored once the
breakage shows on a usable night, except that a test flaky before whose breakage has shown on
one usable night only is too new to tell from a flaky failure (the rules call one failed night
of a known-flaky test flaky): those are counted apart. first_bad is right when it is the first
usable night on or after the breaking night. The baseline calls a test flaky when its outcome
changed at least once over its usable nights, and broken when it failed on the newest one.
"""

from __future__ import annotations

import datetime as dt
import random
import time
from collections import Counter
from dataclasses import dataclass, field

from nightly_assets.testing.flakiness import Observation, Pins, Verdict, classify, infra_nights

SEED = 20261103
NIGHTS = 60
FIRST_NIGHT = dt.date(2026, 9, 5)
REPOS = {"plugin": 0.5, "jax": 0.4, "xla": 0.2}  # repo: the chance its pin moves on a night
SUITES = {  # suite: (attempts a failed test gets, tests)
    "bazel_gpu": (3, 700),
    "bazel_cpu": (3, 600),
    "surefire_it": (2, 500),
    "pytest_unit": (1, 700),
    "pytest_e2e": (1, 500),
    "smoke": (1, 60),
}
SMOKE_BROKEN = (NIGHTS - 6, "plugin")  # the commit that breaks the whole smoke suite
OUTAGE = ("bazel_gpu", (40, 41))  # a runner down for two nights
INFRA_CHANCE, RERUN_CHANCE, RERUN_AFTER_INFRA = 0.03, 0.08, 0.5

Run = tuple[str, int]  # (outcome, attempts)


@dataclass
class SimTest:
    suite: str
    attempts: int
    pass_rate: float = 1.0  # per attempt; below 1: flaky
    breaks: list[tuple[int, int, str]] = field(default_factory=list)  # [start, end) nights, repo
    skip_rate: float = 0.0
    first: int = 0  # the night it was added
    showed_flake: bool = False  # a failed attempt the warehouse keeps, on a run that was no infra failure
    nights: list[tuple[int, list[Run]]] = field(default_factory=list)

    def broken_on(self, night: int) -> bool:
        return any(start <= night < end for start, end, _ in self.breaks)


def _sha(rng: random.Random) -> str:
    return f"{rng.getrandbits(160):040x}"


def _tests(rng: random.Random) -> tuple[list[SimTest], set[tuple[int, str]]]:
    """The tests with their truth, and the (night, repo) pins that must move: breaks and fixes."""
    repos = list(REPOS)
    stays = [(n, rng.choice(repos)) for n in [*rng.sample(range(15, NIGHTS - 1), 8), NIGHTS - 1]]
    fixes = []
    for _ in range(8):
        start = rng.randrange(5, NIGHTS - 12)
        fixes.append((start, start + rng.randint(1, 10), rng.choice(repos), rng.choice(repos)))
    forced = {*stays, SMOKE_BROKEN, *((s, r) for s, _, r, _ in fixes), *((e, r) for _, e, _, r in fixes)}
    tests = []
    for suite, (attempts, count) in SUITES.items():
        for _ in range(count):
            test = SimTest(suite, attempts)
            roll = rng.random()
            if roll < 0.10:
                test.pass_rate = rng.uniform(0.5, 0.99)
            elif roll < 0.125:
                night, repo = rng.choice(stays)
                test.breaks.append((night, NIGHTS, repo))
            elif roll < 0.15:
                start, end, repo, _ = rng.choice(fixes)
                test.breaks.append((start, end, repo))
            if test.breaks and rng.random() < 1 / 3:
                test.pass_rate = rng.uniform(0.5, 0.99)
            roll = rng.random() if suite != "smoke" else 1.0  # smoke: small, never skipped
            if roll < 0.005:
                test.skip_rate, test.pass_rate, test.breaks = 1.0, 1.0, []
            elif roll < 0.015:
                test.first, test.pass_rate, test.breaks = NIGHTS - 2, 1.0, []
            elif roll < 0.095:
                test.skip_rate = 0.3
            if suite == "smoke":
                test.breaks.append((SMOKE_BROKEN[0], NIGHTS, SMOKE_BROKEN[1]))
            tests.append(test)
    return tests, forced


def _run(test: SimTest, night: int, infra: bool, rng: random.Random) -> Run:
    if infra and rng.random() < 0.9:  # the rest ran before the crash
        return "error", 1
    if test.broken_on(night):
        return "failed", test.attempts
    for attempt in range(1, test.attempts + 1):
        if rng.random() < test.pass_rate:
            return "passed", attempt
    return "failed", test.attempts


def _simulate(rng: random.Random) -> tuple[list[SimTest], list[Pins], set[tuple[str, int]], set[int]]:
    """Every test's runs night by night; the pins, the true infra runs (suite, night: first run
    only) and the re-run nights."""
    tests, forced = _tests(rng)
    shas = {repo: _sha(rng) for repo in REPOS}
    pins = []
    for night in range(NIGHTS):
        for repo, chance in REPOS.items():
            if night and (rng.random() < chance or (night, repo) in forced):
                shas[repo] = _sha(rng)
        pins.append(Pins(shas))
    infra = {(s, n) for s in SUITES for n in range(NIGHTS) if rng.random() < INFRA_CHANCE}
    infra |= {(OUTAGE[0], n) for n in OUTAGE[1]}
    hit = {n for _, n in infra}
    reruns = {n for n in range(NIGHTS) if rng.random() < (RERUN_AFTER_INFRA if n in hit else RERUN_CHANCE)}
    for night in range(NIGHTS):
        for test in tests:
            if night < test.first:
                continue
            if rng.random() < test.skip_rate:
                test.nights.append((night, [("skipped", 1)]))
                continue
            crashed = (test.suite, night) in infra
            runs = [_run(test, night, crashed, rng)]
            if night in reruns:
                runs.append(_run(test, night, False, rng))
            test.nights.append((night, runs))
            if not test.broken_on(night):  # a flake the warehouse keeps: in the last run or a re-run
                last, (first, _) = runs[-1], runs[0]
                test.showed_flake |= not (crashed and len(runs) == 1) and (last != ("passed", 1))
                test.showed_flake |= len(runs) > 1 and not crashed and first != "passed"
    return tests, pins, infra, reruns


def _observe(
    tests: list[SimTest], pins: list[Pins]
) -> tuple[dict[str, set[dt.date]], list[list[Observation]]]:
    """What the warehouse reader hands `classify`: per suite the infra nights of the last runs,
    per test its observations (an earlier run only when it was no infra failure)."""
    tallies: dict[tuple[str, int], dict[dt.date, list[int]]] = {}
    for test in tests:
        for night, runs in test.nights:
            for which, (outcome, _) in ((0, runs[0]), (-1, runs[-1])):
                if outcome != "skipped":
                    counts = tallies.setdefault((test.suite, which), {}).setdefault(_day(night), [0, 0])
                    counts[0] += 1
                    counts[1] += outcome != "passed"
    infra = {key: infra_nights({d: (r, f) for d, (r, f) in t.items()}) for key, t in tallies.items()}
    histories = []
    for test in tests:
        history = []
        for night, runs in test.nights:
            (outcome, attempts), day = runs[-1], _day(night)
            earlier = len(runs) > 1 and day not in infra[test.suite, 0]
            history.append(Observation(day, pins[night], outcome, attempts, (runs[0][0],) if earlier else ()))
        histories.append(history)
    return {suite: infra.get((suite, -1), set()) for suite in SUITES}, histories


def _day(night: int) -> dt.date:
    return FIRST_NIGHT + dt.timedelta(days=night)


def _baseline(history: list[Observation], infra: set[dt.date]) -> tuple[bool, bool]:
    """(flaky, broken): its outcome changed at least once; it failed on the newest usable night."""
    outcomes = [o.outcome == "passed" for o in history if o.outcome != "skipped" and o.night not in infra]
    return len(set(outcomes)) > 1, bool(outcomes) and not outcomes[-1]


def _ratio(part: int, whole: int) -> float:
    return part / whole if whole else 1.0


def main() -> dict[str, float]:
    rng = random.Random(SEED)
    tests, pins, true_infra, reruns = _simulate(rng)
    print(
        f"flaky detection: {NIGHTS} nights x {len(tests):,} tests in {len(SUITES)} suites,"
        f" {len(REPOS)} repos, seed {SEED}"
    )
    infra, histories = _observe(tests, pins)
    start = time.perf_counter()
    verdicts = [classify(h, infra=infra[t.suite]) for t, h in zip(tests, histories, strict=True)]
    elapsed = time.perf_counter() - start
    still = {(s, _day(n)) for s, n in true_infra if n not in reruns}  # infra on the night's last run
    found = {(s, d) for s, days in infra.items() for d in days}
    unmoved = sum(pins[n] == pins[n - 1] for n in range(1, NIGHTS))
    smoke_kept = sum(_day(n) not in infra["smoke"] for n in range(SMOKE_BROKEN[0], NIGHTS))
    print(
        f"  {unmoved} nights with no pin moved, {len(reruns)} re-run; infra suite-nights (last run):"
        f" {len(still)} true, {len(found & still)} found, {len(found - still)} wrongly; smoke broken"
        f" wholesale: {smoke_kept} of {NIGHTS - SMOKE_BROKEN[0]} nights kept as evidence"
    )

    rows: Counter[tuple[str, str]] = Counter()
    scores: Counter[str] = Counter()
    for test, history, verdict in zip(tests, histories, verdicts, strict=True):
        truth = _score(test, history, verdict, infra[test.suite], scores)
        rows[truth, verdict.state] += 1
    _table(rows)

    ratios = {
        "flaky_precision": _ratio(scores["flaky called right"], scores["flaky called"]),
        "flaky_recall": _ratio(scores["flaky with a chance, called"], scores["flaky with a chance"]),
        "broken_called_flaky": float(scores["broken called flaky"]),
        "broken_precision": _ratio(scores["broken called right"], scores["broken called"]),
        "broken_recall": _ratio(scores["broken called right"], scores["broken"]),
        "first_bad_match": _ratio(scores["first_bad right"], scores["broken called right"]),
        "baseline_flaky_precision": _ratio(scores["base flaky called right"], scores["base flaky called"]),
        "baseline_flaky_recall": _ratio(
            scores["base flaky with a chance, called"], scores["flaky with a chance"]
        ),
        "baseline_broken_called_flaky": float(scores["base broken called flaky"]),
        "baseline_broken_precision": _ratio(scores["base broken called right"], scores["base broken called"]),
        "baseline_broken_recall": _ratio(scores["base broken called right"], scores["broken"]),
    }
    _print_scores(ratios, scores)
    print(f"  classified {len(tests):,} tests in {elapsed:.2f} s")
    return ratios


def _score(
    test: SimTest, history: list[Observation], verdict: Verdict, infra: set[dt.date], scores: Counter[str]
) -> str:
    """Counts one test into `scores`; returns its truth row."""
    usable = [o.night for o in history if o.outcome != "skipped" and o.night not in infra]
    broken_since = NIGHTS
    while broken_since and test.broken_on(broken_since - 1):
        broken_since -= 1
    seen_broken = [d for d in usable if d >= _day(broken_since)]
    flaky, broken = test.pass_rate < 1, broken_since < NIGHTS
    if broken and (not seen_broken or (flaky and len(seen_broken) == 1)):
        scores["not scored"] += 1
        return "too new to tell" if seen_broken else "broken, not seen yet"
    base_flaky, base_broken = _baseline(history, infra)
    scores["flaky called"] += verdict.state == "flaky"
    scores["broken called"] += verdict.state == "broken"
    scores["base flaky called"] += base_flaky
    scores["base broken called"] += base_broken
    if broken:
        scores["broken"] += 1
        scores["broken called flaky"] += verdict.state == "flaky"
        scores["base broken called flaky"] += base_flaky
        scores["base broken called right"] += base_broken
        if verdict.state == "broken":
            scores["broken called right"] += 1
            scores["first_bad right"] += verdict.first_bad == seen_broken[0]
            repo = next(r for start, _, r in test.breaks if start == broken_since)
            scores["suspects right"] += repo in verdict.suspects
        row = "broken, suite-wide" if test.suite == "smoke" else "broken"
        return row + (", flaky before" if flaky else "")
    if flaky:
        scores["flaky"] += 1
        scores["flaky called right"] += verdict.state == "flaky"
        scores["flaky called broken"] += verdict.state == "broken"
        scores["base flaky called right"] += base_flaky
        if test.showed_flake:
            scores["flaky with a chance"] += 1
            scores["flaky with a chance, called"] += verdict.state == "flaky"
            scores["base flaky with a chance, called"] += base_flaky
        return "flaky, fixed breakage" if test.breaks else "flaky"
    if test.skip_rate == 1.0 or test.first:
        return "new or always skipped"
    return "fixed breakage" if test.breaks else "stable"


def _print_scores(ratios: dict[str, float], scores: Counter[str]) -> None:
    called = {
        kind: f"{scores[kind + ' called']} vs {scores['base ' + kind + ' called']} called"
        for kind in ("flaky", "broken")
    }
    print(f"\n  {'':46} {'classify':>9} {'baseline':>9}")
    for label, name in (
        (f"flaky precision ({called['flaky']})", "flaky_precision"),
        (f"flaky recall ({scores['flaky with a chance']} with a failure)", "flaky_recall"),
        ("broken called flaky (must be 0)", "broken_called_flaky"),
        (f"broken precision ({called['broken']})", "broken_precision"),
        (f"broken recall ({scores['broken']} scored)", "broken_recall"),
    ):
        print(f"  {label:<46} {ratios[name]:9.2f} {ratios['baseline_' + name]:9.2f}")
    for label, value in (
        (
            f"flaky recall over all {scores['flaky']} flaky",
            _ratio(scores["flaky called right"], scores["flaky"]),
        ),
        ("first_bad on the breaking night", ratios["first_bad_match"]),
        ("suspects hold the breaking repo", _ratio(scores["suspects right"], scores["broken called right"])),
    ):
        print(f"  {label:<46} {value:9.2f}")
    print(f"  {'flaky called broken':<46} {scores['flaky called broken']:9d}")
    print(f"  {'broken, not scored (too new to tell)':<46} {scores['not scored']:9d}")


ROWS = (
    "stable",
    "new or always skipped",
    "fixed breakage",
    "flaky",
    "flaky, fixed breakage",
    "broken",
    "broken, flaky before",
    "broken, suite-wide",
    "broken, suite-wide, flaky before",
    "too new to tell",
    "broken, not seen yet",
)


def _table(rows: Counter[tuple[str, str]]) -> None:
    states = ("stable", "flaky", "broken", "insufficient")
    print(f"\n  {'truth / verdict':<34} {'tests':>6}" + "".join(f" {s:>12}" for s in states))
    for truth in ROWS:
        counts = [rows[truth, s] for s in states]
        if sum(counts):
            print(f"  {truth:<34} {sum(counts):6d}" + "".join(f" {c:12d}" for c in counts))


if __name__ == "__main__":
    main()
