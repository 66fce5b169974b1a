"""Flaky or broken: one test's nightly history classified from its outcomes, retries, re-runs and
pinned commits; pure Python (`benchmarks/flaky_detection.py` scores it on a simulated history).

A night is *usable* unless the test was skipped (or only collected) or it is an infra night of
its suite (`infra_nights`: the suite failed wholesale, which says nothing about any one test). A
usable night *failed* when every attempt of every run failed, and is *clean* when it passed on
the first attempt with no re-run disagreeing. Over the usable nights, oldest first:

* Flaky evidence: the same commits gave both outcomes. A pass after a retry within a night, a
  re-run of the night that disagrees, or two consecutive usable nights with identical pins of
  which one failed and the other did not; each counts once. Pins move on most nights, so there
  is a weaker, statistical signal too: a *blip*, one failed night between two that were not
  (with moved pins on both sides, else it is already a flip). One blip may as well be a
  breakage fixed the next day; two or more make the test flaky. A longer failed stretch that
  recovered counts as a blip too: one may be a breakage fixed a few nights later, but each
  recovery needs a fix, and a test fixed twice in the window fails more often than commits break
  it (a test failing half its nights has such stretches, not single nights, most of the time).
* Broken: a streak of failed nights reaching the newest night (infra and skipped nights neither
  start nor break it). For a test with no flaky evidence before the streak, two or more nights
  are broken, and so is one night unless the flip into it had unchanged pins (then it is a
  flake until it fails again) or its one attempt was never re-run (no retry, no confirmation:
  over `confirm.max_tests`, or a runner that cannot re-run), which waits for a second night:
  one attempt cannot tell a flake of a test not known to be flaky from a breakage, and
  confirmation exists to tell. Given its `Suite` (the caller's: tonight's verdicts of the
  suite's other tests), such a test is broken only if the suite's flaky tests do not explain it
  either: the chance that it is one of them that has not shown it yet (`Suite.by_chance`: each
  flaky test's rate weighed by how likely it gave the test's attempts before the streak, the
  suite's other tests, failing only when broken, by their number) is at most FALSE_BROKEN_CHANCE
  spread over the usable nights and over the suite's tests failing tonight with no flaky
  evidence (judged alike, they share it). A new suite full of flaky tests is where this holds:
  a test that passed twice is as likely a hidden flake as a breakage; one with thirty clean
  nights is not (no test failing a third of its attempts passes thirty in a row). A test known
  to be flaky before the streak is broken once its own flakiness no longer explains the streak:
  the chance that every attempt of the streak failed by chance at its failure rate per attempt
  before it is at most FALSE_BROKEN_CHANCE spread over the usable nights of the window
  (Bonferroni: the test is judged again every night) and, given its `Suite`, over the suite's
  known-flaky tests failing tonight (in a suite of 180 tests failing half their attempts, one of
  them has a three-night streak most nights: the alerts a suite sends a night are what people
  receive). The rate is held with the doubt its few
  attempts leave (Laplace's rule of succession applied attempt by attempt: the mean of
  rate^attempts over what the attempts before allow), not as a point: at a point estimate, a
  test failing half its attempts estimated at a third from thirty nights is broken by a streak
  it gives every few weeks. Attempts count: the final run's attempts (a suite's own retries and
  the confirmation re-runs of a failure, which record a pass as a pass after that many
  attempts) and one per earlier run. So flaky never hides broken for long: over 30 usable
  nights, a flaky test failing three attempts a night (two confirmation re-runs) that failed 1
  of 30 attempts before is broken on its second failed night, 4 of 12 on its fourth. A streak
  on `suite_wide` nights (its suite failed wholesale for longer than an outage: every test of it
  failed together, night after night) is broken whatever the test's flakiness, from the suite's
  first such night (a flaky test that failed by its own flake the night before is no exception).
  A known-flaky test's streak that fails every night with a telling signature it never failed
  with before is weighed by that too (`_novel`): its flakes give a new message with a chance of
  d/(k+1), d the signatures new at their time among its k signed failures before (a test that
  always flakes alike rarely gives a new one; one whose flakes vary often does), multiplied into
  the chance of the streak's attempts: a breakage of a test failing half its attempts is found
  in a few nights, not left to its failure rate. The streak's first night is `first_bad`, the
  usable night before it `last_good`, and every repository whose pin differs between the two
  is a suspect (None on the side that lacks it). A test that failed on every usable night is
  broken once it has `min_nights` of them (no last_good, no suspects).
* Flakier (a burst): a known-flaky test whose failure rate jumped, say to 90 % for a week, is
  still flaky while its failures pass on re-runs now and then, "flakier since <night>"
  (`Verdict.flakier_since`, alerted once by the test_health stage), not a new broken test at
  each failed streak. Its burst is the stretch from a night `b` to the newest night that still
  holds a night that was not failed, where the test showed it was flaky by `b` (the night of the
  evidence that made it flaky, or the failed nights that led to it: a burst's first nights are
  often the ones that show a test's flakiness, and a burst is judged by its rate, not by them): of those
  starts, the likeliest change of its rate per attempt (the largest likelihood ratio of one rate
  before `b` and another since over one rate for all), when it fails more often since and failed
  so many of the stretch's attempts that its rate per attempt before `b` (Laplace's rule) gives
  that many or more with a chance of at most FLAKIER_CHANCE spread over the usable nights and the
  starts tried (Bonferroni: judged every night, at every start). A failed streak of a test in a
  burst before the streak is judged at the burst's own rate per attempt (its nights from `b` to
  the streak, Laplace's rule) when that is higher: broken once the chance that every attempt of
  the streak failed at that rate is at most FALSE_BROKEN_CHANCE over the usable nights, as above.
  So a breakage in a burst is found late, as probability has it: at a burst rate of 81 % (12 of
  14 attempts failed), three attempts a night, 14 failed nights in a row; at 90 %, 26. A burst
  that starts with a failed streak cannot be told from a breakage until the test passes again:
  that streak is judged at the rate before it, and on the night the test passes it is flaky
  again, flakier since the streak's first night. Unless it fails with its own flake: a streak
  whose every night failed with one telling signature (more than a bare comparison of values)
  that the test failed with before the streak is flakier since its first night, not broken,
  until it has lasted `min_nights` nights, the history any verdict needs (a breakage usually
  fails with a message of its own; the same flake failing night after night is a burst until
  the nights say otherwise). That holds a test with no flaky evidence too (its earlier failure
  with that signature recovered): insufficient until then. Its earlier failures count from before
  the window too (`flakes`, all the warehouse holds): a failure's message names its cause, which
  does not age as a failure rate does, so a burst of a test whose flakes are too rare to show in
  the window is told from a breakage when it flaked so before.
* Fewer than `min_nights` usable nights is insufficient, unless the verdict needs no more
  history: a failed streak after a pass, or flaky evidence. (So a new pipeline's second night
  names the commit that broke a test; the price is paid on a flaky suite's first nights, when no
  flaky test is known yet and a confirmed flake looks like a breakage.)
* Otherwise the test is stable: a breakage that was fixed included.

`in_quarantine`: a flaky test stays in quarantine until it has had `clean_nights` consecutive
clean usable nights after its last evidence (a known-flaky test's failure on the newest night
is evidence). A broken test is never in quarantine, so its failures gate the night.

`Observation.earlier` holds only the earlier runs of the night that were not infra failures
themselves (the caller checks each run's suite tallies with `infra_nights`): a runner crash
followed by a good re-run is not flaky evidence.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field, replace
from typing import Literal

from nightly_assets.testing.signatures import is_generic
from nightly_assets.words import plural

State = Literal["stable", "flaky", "broken", "insufficient"]
RAN = frozenset({"passed", "failed", "error"})  # skipped (or collect-only "collected") is no evidence
MIN_BLIPS = 2  # one-night failures that make a test flaky without same-commit evidence
# The chance we accept that one flaky test is called broken by chance over its window: a false
# broken verdict alerts and starts a culprit search, a true one missed tonight alerts tomorrow,
# so it is the conventional 1 % significance level rather than 5 %.
FALSE_BROKEN_CHANCE = 0.01
# The chance we accept that a flaky test's ordinary failures look like a burst: a false one is one
# WARN line and a broken verdict a few nights late, so the same level as a false broken verdict.
FLAKIER_CHANCE = FALSE_BROKEN_CHANCE
SHOWN = 3  # pieces of evidence a reason names


class Pins(Mapping[str, str]):
    """Repo -> sha of one night: immutable, hashable, equal when the same commits are pinned."""

    __slots__ = ("_pins",)

    def __init__(self, pins: Mapping[str, str] | Iterable[tuple[str, str]] = ()) -> None:
        self._pins = dict(sorted(dict(pins).items()))  # sorted: equal pins hash alike

    def __getitem__(self, repo: str) -> str:
        return self._pins[repo]

    def __iter__(self) -> Iterator[str]:
        return iter(self._pins)

    def __len__(self) -> int:
        return len(self._pins)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Pins):
            return self._pins == other._pins
        return isinstance(other, Mapping) and self._pins == dict(other)

    def __hash__(self) -> int:
        return hash(tuple(self._pins.items()))

    def __repr__(self) -> str:
        return f"Pins({self._pins!r})"


@dataclass(frozen=True)
class Observation:
    """One test on one night: its final run's outcome and attempts, the outcomes of the night's
    earlier runs (re-runs with the same pins, oldest first, infra runs left out), the pins (any
    mapping; kept as `Pins`) and what it failed with."""

    night: dt.date
    pins: Mapping[str, str]
    outcome: str  # "passed" | "failed" | "error" | "skipped" (or "collected": no evidence either)
    attempts: int = 1
    earlier: tuple[str, ...] = ()
    # the failure's signature (testing/signatures.py): the final run's, or its failed attempts'
    # when it passed on a retry; None when it did not fail or left no message
    signature: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.pins, Pins):
            object.__setattr__(self, "pins", Pins(self.pins))


def failed_with(obs: Observation) -> str | None:
    """The signature a test failed with on its night: its final run's failure, or the failed
    attempts of a run that passed on a retry or a confirmation re-run."""
    if obs.outcome in RAN and (obs.outcome != "passed" or obs.attempts > 1):
        return obs.signature
    return None


MIN_WHOLESALE_FAILURES = 5  # a suite of three tests with two failing is no infra failure


def is_wholesale(ran: int, failed: int, share: float = 0.5) -> bool:
    """Whether a suite's run failed wholesale (an infra failure): nothing ran, or at least `share`
    of what ran failed, and at least MIN_WHOLESALE_FAILURES tests (a small suite's failures are
    its tests' own)."""
    return ran == 0 or failed >= max(share * ran, MIN_WHOLESALE_FAILURES)


def wholesale_nights(
    tallies: Mapping[dt.date, tuple[int, int]], share: float = 0.5, *, max_outage_nights: int = 3
) -> tuple[set[dt.date], set[dt.date]]:
    """The nights one suite failed wholesale (at least `share` of the tests that ran, ran, failed
    or errored in `tallies`, failed, or none ran), split into outages (infra nights) and the
    nights of a breakage of the whole suite: a wholesale failure that has lasted more than
    `max_outage_nights` up to the newest night is no outage but a commit that broke the suite."""
    wholesale = {night for night, (ran, failed) in tallies.items() if is_wholesale(ran, failed, share)}
    newest_first = sorted(tallies, reverse=True)
    ongoing = next((i for i, night in enumerate(newest_first) if night not in wholesale), len(tallies))
    broken = set(newest_first[:ongoing]) if ongoing > max_outage_nights else set()
    return wholesale - broken, broken


def infra_nights(
    tallies: Mapping[dt.date, tuple[int, int]], share: float = 0.5, *, max_outage_nights: int = 3
) -> set[dt.date]:
    """The nights one suite failed wholesale as an outage (`wholesale_nights`): a suite-wide
    breakage's nights are left in, so its tests are reported broken."""
    return wholesale_nights(tallies, share, max_outage_nights=max_outage_nights)[0]


def suite_broken(
    tallies: Mapping[dt.date, tuple[int, int]], share: float = 0.5, *, max_outage_nights: int = 3
) -> set[dt.date]:
    """The nights of a suite-wide breakage (`wholesale_nights`): every test of the suite broken."""
    return wholesale_nights(tallies, share, max_outage_nights=max_outage_nights)[1]


@dataclass(frozen=True)
class Verdict:
    """One test's classification over its history, with why and, when broken, where."""

    state: State
    reason: str  # one line: why
    first_bad: dt.date | None = None  # broken: the first night of the failed streak
    last_good: dt.date | None = None  # broken: the usable night before it (None: never passed)
    # broken: repo -> (sha on last_good, sha on first_bad) of every repo whose pin changed
    suspects: dict[str, tuple[str | None, str | None]] = field(default_factory=dict)
    flaky_evidence: int = 0  # independent pieces of flaky evidence (blips included)
    pass_rate: float | None = None  # passed runs / runs over the usable nights
    # flaky: the first night of a burst (a known-flaky test failing far more often since), with
    # its failed share of attempts since and its rate per attempt before (Laplace's rule)
    flakier_since: dt.date | None = None
    burst_rate: float | None = None
    rate_before: float | None = None
    # its failed share of attempts over the usable nights (Laplace's rule): a flaky test's is what
    # `Suite.flaky_rates` holds for the suite's other tests
    fail_rate: float | None = None


# A base rate needs several tests: a suite with a flaky test or two (a small suite's, most often)
# has their stories, not a rate its other tests share (as MIN_WHOLESALE_FAILURES for infra).
MIN_FLAKY_PEERS = MIN_WHOLESALE_FAILURES


@dataclass(frozen=True)
class Suite:
    """What a test's suite tells of its failure tonight: the tests of the suite that ran, the
    failure rates per attempt of those judged flaky (what a failure with no flaky evidence of its
    own is weighed against), and how many failed tonight with no flaky evidence (`judged`) and as
    known-flaky tests (`flaky_failing`): each is judged alike with the others of its kind, so the
    chance of a false broken verdict is spread over them (what people receive is a suite's
    alerts a night, not one test's)."""

    tests: int
    flaky_rates: tuple[float, ...] = ()
    judged: int = 1
    flaky_failing: int = 1

    def by_chance(self, failed: int, tried: int, streak: int) -> float:
        """The chance that a test which failed `failed` of its `tried` attempts before a streak of
        `streak` failed attempts is one of the suite's flaky tests that has not shown it: each
        flaky test's rate weighed by how well it explains the test's attempts before (a test that
        passed many attempts is no test failing half of them), the suite's other tests (failing
        only when broken) by their number."""
        rates = [r for r in self.flaky_rates if 0 < r < 1]
        if len(rates) < MIN_FLAKY_PEERS:
            return 0.0
        weights = [r**failed * (1 - r) ** (tried - failed) for r in rates]
        stable = max(self.tests - len(rates), 0)
        return sum(w * r**streak for w, r in zip(weights, rates, strict=True)) / (stable + sum(weights))


@dataclass(frozen=True)
class _Night:
    """One usable night of one test."""

    night: dt.date
    pins: Mapping[str, str]
    runs: int  # the final run and the earlier ones
    passes: int  # runs that ended passed (after retries or not)
    retried: bool  # the final run passed after failed attempts
    attempts: int  # of every run: the final run's own, one per earlier run (its attempts are not kept)
    failures: int  # failed attempts among them
    signature: str | None  # what it failed with (a failed night, or the failed attempts of a retry)

    @property
    def failed(self) -> bool:  # every attempt of every run
        return self.passes == 0

    @property
    def clean(self) -> bool:
        return self.passes == self.runs and not self.retried


@dataclass(frozen=True)
class _Evidence:
    at: int  # index of the usable night that showed it
    text: str
    blip: bool = False


def _usable(history: Sequence[Observation], infra: AbstractSet[dt.date]) -> list[_Night]:
    nights = []
    for obs in history:
        if obs.outcome not in RAN or obs.night in infra:
            continue
        outcomes = [*(o for o in obs.earlier if o in RAN), obs.outcome]
        passes = sum(o == "passed" for o in outcomes)
        retried = obs.outcome == "passed" and obs.attempts > 1
        attempts = max(obs.attempts, 1) + len(outcomes) - 1
        failures = attempts - passes
        sig = failed_with(obs)
        nights.append(_Night(obs.night, obs.pins, len(outcomes), passes, retried, attempts, failures, sig))
    return nights


def _span(first: dt.date, last: dt.date) -> str:
    return f"{first}→{last:%d}" if (first.year, first.month) == (last.year, last.month) else f"{first}→{last}"


def _evidence(nights: Sequence[_Night]) -> list[_Evidence]:
    found = []
    for i, night in enumerate(nights):
        if night.retried:
            found.append(_Evidence(i, f"passed on retry on {night.night}"))
        if 0 < night.passes < night.runs:
            found.append(_Evidence(i, f"re-runs disagreed on {night.night}"))
        if i == 0:
            continue
        before = nights[i - 1]
        if before.failed != night.failed and before.pins == night.pins:
            found.append(_Evidence(i, f"flipped with unchanged commits {_span(before.night, night.night)}"))
        elif before.failed and not night.failed:
            onset = i - 1  # the failed stretch's first night: a blip, unless the flip into it counted
            while onset and nights[onset - 1].failed:
                onset -= 1
            if onset and nights[onset - 1].pins != nights[onset].pins:
                text = str(before.night) if onset == i - 1 else _span(nights[onset].night, before.night)
                found.append(_Evidence(i, text, blip=True))
    return found


def _is_flaky(evidence: Sequence[_Evidence]) -> bool:
    return any(not e.blip for e in evidence) or sum(e.blip for e in evidence) >= MIN_BLIPS


def _rate(nights: Sequence[_Night]) -> float:
    """The failure rate per attempt (Laplace's rule: never 0 or 1 from a few attempts)."""
    return (sum(n.failures for n in nights) + 1) / (sum(n.attempts for n in nights) + 2)


def _by_chance(nights: Sequence[_Night], start: int, since: int | None = None) -> float:
    """The chance that a flaky test fails every attempt of the streak from `start` on. By default
    at its rate per attempt before the streak, held with the doubt a rate known from few attempts
    deserves: Laplace's rule applied attempt by attempt (each failed attempt of the streak counted
    before the next is judged), the mean of rate^attempts over what its attempts before allow.
    With `since`: at the rate of a burst from that night to the streak, as estimated (Laplace's
    rule): a burst's rate is near 1, where that doubt would let a streak explain itself for as
    long as the window lasts, and flaky must not hide broken for long."""
    attempts = sum(n.attempts for n in nights[start:])
    failed = sum(n.failures for n in nights[since or 0 : start])
    tried = sum(n.attempts for n in nights[since or 0 : start])
    if since is not None:
        return float(((failed + 1) / (tried + 2)) ** attempts)
    chance = 1.0
    for i in range(attempts):
        chance *= (failed + 1 + i) / (tried + 2 + i)
    return chance


def _tail(failed: int, attempts: int, rate: float) -> float:
    """The chance of `failed` or more failed attempts of `attempts` at `rate` each (binomial),
    for `failed` above the expected count (the terms fall from the first)."""
    if failed <= 0:
        return 1.0
    log_term = (
        math.lgamma(attempts + 1)
        - math.lgamma(failed + 1)
        - math.lgamma(attempts - failed + 1)
        + failed * math.log(rate)
        + (attempts - failed) * math.log1p(-rate)
    )
    term, total, odds = math.exp(log_term), 0.0, rate / (1 - rate)
    for k in range(failed, attempts + 1):
        total += term
        if term <= total * 1e-12:
            break
        term *= (attempts - k) / (k + 1) * odds
    return total


@dataclass(frozen=True)
class _Burst:
    at: int  # the usable night it starts
    rate: float  # its failure rate per attempt up to `end` (Laplace's rule)
    before: float  # the rate per attempt before it


def _burst(nights: Sequence[_Night], end: int, evidence: Sequence[_Evidence]) -> _Burst | None:
    """The burst among nights[:end] (see the module's docstring), or None."""
    passed = [i for i in range(end) if not nights[i].failed]
    known = next((e.at for e in evidence if _is_flaky([f for f in evidence if f.at <= e.at])), end)
    while 0 < known < end and nights[known - 1].failed:
        known -= 1  # the failed nights that led to the evidence showed it too: a burst may start there
    starts = range(max(known, 1), passed[-1] + 1 if passed else 0)
    if not starts:
        return None
    failures, attempts = [0], [0]
    for night in nights[:end]:
        failures.append(failures[-1] + night.failures)
        attempts.append(attempts[-1] + night.attempts)
    best: tuple[float, int] | None = None  # (log-likelihood ratio, start)
    whole = _log_likelihood(failures[end], attempts[end])
    for b in starts:
        failed, tried = failures[end] - failures[b], attempts[end] - attempts[b]
        if failed * attempts[b] <= failures[b] * tried:
            continue  # not failing more often since
        ratio = _log_likelihood(failures[b], attempts[b]) + _log_likelihood(failed, tried) - whole
        if best is None or ratio > best[0]:
            best = (ratio, b)
    if best is None:
        return None
    b = best[1]
    rate = (failures[b] + 1) / (attempts[b] + 2)
    failed, tried = failures[end] - failures[b], attempts[end] - attempts[b]
    if _tail(failed, tried, rate) > FLAKIER_CHANCE / (len(nights) * len(starts)):
        return None
    return _Burst(b, (failed + 1) / (tried + 2), rate)


def _novel(nights: Sequence[_Night], start: int, flakes: AbstractSet[str] = frozenset()) -> float:
    """The chance that a flaky test's flakes give what the streak from `start` shows when every
    night of it failed with a telling signature it never failed with before the streak: of its k
    failures before that left a signature, d gave one new then, so a flake gives a new one with a
    chance of d/(k+1) (the rule of succession over its failures after the first), counted night by
    night as in `_by_chance`; 1 when any night of the streak failed with a known, generic or no
    signature, or no failure before left one (nothing to compare)."""
    known = [n.signature for n in nights[:start] if n.signature is not None]
    seen = set(known)
    streak = [n.signature for n in nights[start:]]
    if not known or any(sig is None or sig in seen or sig in flakes or is_generic(sig) for sig in streak):
        return 1.0
    chance = 1.0  # each distinct signature was new once: d is how many there are
    for j in range(len(streak)):
        chance *= (len(seen) + j) / (len(known) + 1 + j)
    return chance


def _suite_wide_from(nights: Sequence[_Night], start: int, suite_wide: AbstractSet[dt.date]) -> int | None:
    """The first night of the streak from `start` from which every night, the newest included, is
    one of its suite's breakage (`suite_broken`), or None: a flaky test that failed by its own
    flake the night before its suite broke is broken with the suite from the suite's first night."""
    at = len(nights)
    while at > start and nights[at - 1].night in suite_wide:
        at -= 1
    return at if at < len(nights) else None


def _known_flake(nights: Sequence[_Night], start: int, flakes: AbstractSet[str] = frozenset()) -> str | None:
    """The signature every night of the streak from `start` failed with, when the test failed
    with it before the streak (a flake of its own; `flakes`: before the window) and it tells more
    than a bare comparison."""
    streak = {n.signature for n in nights[start:]}
    if len(streak) != 1 or (sig := streak.pop()) is None or is_generic(sig):
        return None
    return sig if sig in flakes or any(n.signature == sig for n in nights[:start]) else None


def _log_likelihood(failed: int, attempts: int) -> float:
    """Of `failed` of `attempts` at their own rate (binomial, without the constant)."""
    p = failed / attempts if attempts else 0.0
    return (failed * math.log(p) if failed else 0.0) + (
        (attempts - failed) * math.log1p(-p) if attempts > failed else 0.0
    )


def _describe(evidence: Sequence[_Evidence]) -> str:
    parts = [e.text for e in evidence if not e.blip]
    blips = [e.text for e in evidence if e.blip]
    if blips:
        parts.append(f"failed single nights {', '.join(blips[:SHOWN])}{' ...' if len(blips) > SHOWN else ''}")
    more = len(parts) - SHOWN
    return "; ".join(parts[:SHOWN]) + (f"; {more} more" if more > 0 else "")


def _broken(
    nights: Sequence[_Night],
    start: int,
    evidence: Sequence[_Evidence],
    pass_rate: float | None,
    last: str = "last passed",
) -> Verdict:
    first_bad, streak = nights[start], len(nights) - start
    failing = f"failed every attempt on {streak} night{'s' * (streak > 1)} since {first_bad.night}"
    if start == 0:
        return Verdict("broken", f"{failing}; never passed", first_bad.night, pass_rate=pass_rate)
    last_good = nights[start - 1]
    suspects = {
        repo: (last_good.pins.get(repo), first_bad.pins.get(repo))
        for repo in sorted({*last_good.pins, *first_bad.pins})
        if last_good.pins.get(repo) != first_bad.pins.get(repo)
    }
    changed = ", ".join(
        f"{repo} {old and old[:10]}→{new and new[:10]}" for repo, (old, new) in suspects.items()
    )
    reason = f"{failing}; {last} {last_good.night}; " + (
        f"changed: {changed}" if changed else "no pinned commit changed (the environment?)"
    )
    if evidence:
        reason += f"; flaky before ({len(evidence)} piece{'s' * (len(evidence) > 1)} of evidence)"
    return Verdict("broken", reason, first_bad.night, last_good.night, suspects, len(evidence), pass_rate)


def classify(
    history: Sequence[Observation],
    *,
    infra: AbstractSet[dt.date] = frozenset(),
    min_nights: int = 3,
    suite: Suite | None = None,
    suite_wide: AbstractSet[dt.date] = frozenset(),
    flakes: AbstractSet[str] = frozenset(),
) -> Verdict:
    """One test's verdict over its history (oldest night first, one observation a night); with
    `suite`, a failure with no flaky evidence of its own is weighed against the suite's flaky tests;
    `suite_wide`: the nights of its suite's breakage (`suite_broken`), a streak on which is broken
    whatever the test's flakiness (every test of the suite failed together, night after night);
    `flakes`: the signatures it failed with before the window (the warehouse's longer memory),
    known flakes as those of the window are."""
    nights = _usable(history, infra)
    evidence = _evidence(nights)
    flaky = _is_flaky(evidence)
    runs = sum(n.runs for n in nights)
    pass_rate = sum(n.passes for n in nights) / runs if runs else None
    start = len(nights)
    while start and nights[start - 1].failed:
        start -= 1
    streak = len(nights) - start
    burst = None  # in a burst before the streak, judged at the burst's rate when higher
    known_flake = None  # the flake a known-flaky test's streak fails with: a burst, for a while
    unconfirmed = streak == 1 and nights[-1].attempts == 1  # one attempt, never re-run
    chance = held = None  # held: the chance that the suite's flaky tests explain the streak
    novel = 1.0  # the chance that its flakes give the streak's new message (`_novel`)
    if streak and (start or len(nights) >= min_nights):
        wide_at = _suite_wide_from(nights, start, suite_wide)
        together = wide_at is not None
        if together:
            broken = True  # no flakiness of its own explains a whole suite failing so long
        elif _is_flaky([e for e in evidence if e.at < start]):
            novel = _novel(nights, start, flakes)
            chance = _by_chance(nights, start) * novel
            alike = max(suite.flaky_failing, 1) if suite is not None else 1
            broken = chance <= FALSE_BROKEN_CHANCE / (len(nights) * alike)
            if broken and (burst := _burst(nights, start, evidence)) and burst.rate > _rate(nights[:start]):
                chance = _by_chance(nights, start, burst.at) * novel
                broken = chance <= FALSE_BROKEN_CHANCE / (len(nights) * alike)
            else:
                burst = None
        else:  # the flip into a single failed night with unchanged pins is a flake until it fails again
            broken = (streak >= 2 or not flaky) and not unconfirmed
            if broken and suite is not None:
                held = suite.by_chance(
                    sum(n.failures for n in nights[:start]),
                    sum(n.attempts for n in nights[:start]),
                    sum(n.attempts for n in nights[start:]),
                )
                broken = held <= FALSE_BROKEN_CHANCE / (len(nights) * max(suite.judged, 1))
        if (
            broken
            and not together
            and streak < min_nights
            and (known_flake := _known_flake(nights, start, flakes))
        ):
            broken = False
        if broken and wide_at is not None:  # broken with its suite, from the suite's first night
            last = "last passed" if wide_at == start else "its suite last passed"
            verdict = _broken(nights, wide_at, evidence, pass_rate, last)
            return replace(verdict, reason=f"{verdict.reason}; its whole suite failed with it each night")
        if broken and novel < 1:  # its own flakes did not give the streak's message either
            verdict = _broken(nights, start, evidence, pass_rate)
            return replace(
                verdict, reason=f"{verdict.reason}; failing with `{nights[-1].signature}`, never its flake"
            )
        if broken:
            return _broken(nights, start, evidence, pass_rate)
        if known_flake is not None and not flaky:
            reason = (
                f"failing with `{known_flake}` since {nights[start].night}, as it failed before and"
                f" passed again: broken at {min_nights} nights"
            )
            return Verdict("insufficient", reason, flaky_evidence=len(evidence), pass_rate=pass_rate)
        if unconfirmed and not flaky:
            reason = f"failed its one attempt on {nights[-1].night}, not re-run: broken if it fails again"
            return Verdict("insufficient", reason, flaky_evidence=len(evidence), pass_rate=pass_rate)
        if held is not None and suite is not None and not flaky:
            attempts = sum(n.attempts for n in nights[start:])
            reason = (
                f"failed every attempt since {nights[start].night} ({plural(attempts, 'attempt')}), no flaky"
                f" evidence of its own, but {plural(len(suite.flaky_rates), 'flaky test')} of its suite's"
                f" {suite.tests} fail so with a {held:.1%} chance: broken once that is less likely"
            )
            return Verdict("insufficient", reason, flaky_evidence=len(evidence), pass_rate=pass_rate)
    if flaky:
        reason = _describe(evidence)
        flakier = _burst(nights, len(nights), evidence) or burst
        if known_flake is not None:  # the streak is its burst until it has lasted min_nights
            failed_since = sum(n.failures for n in nights[start:])
            tried_since = sum(n.attempts for n in nights[start:])
            flakier = _Burst(start, (failed_since + 1) / (tried_since + 2), _rate(nights[:start]))
            reason = f"failing with its known flake `{known_flake}`, broken at {min_nights} nights; {reason}"
        if flakier is not None:
            since = nights[flakier.at].night
            reason = (
                f"flakier since {since}: failed {flakier.rate:.0%} of its attempts since,"
                f" {flakier.before:.0%} before; {reason}"
            )
        if streak:
            attempts = sum(n.attempts for n in nights[start:])
            failing = (
                f"failed every attempt on {nights[-1].night}"
                if streak == 1
                else f"failed every attempt on {streak} nights since {nights[start].night}"
            )
            odds = f", {chance:.1%} by chance" if chance is not None else ""
            if burst is not None:
                odds += f" at its rate since {nights[burst.at].night}"
            tried = f"{attempts} attempt{'s' * (attempts > 1)}{odds}"
            reason = f"{failing} ({tried}), a flaky test's failure; {reason}"
        if flakier is None:
            return Verdict(
                "flaky", reason, flaky_evidence=len(evidence), pass_rate=pass_rate, fail_rate=_rate(nights)
            )
        return Verdict(
            "flaky",
            reason,
            flaky_evidence=len(evidence),
            pass_rate=pass_rate,
            flakier_since=nights[flakier.at].night,
            burst_rate=flakier.rate,
            rate_before=flakier.before,
            fail_rate=_rate(nights),
        )
    left_out = (
        f"; {len(history) - len(nights)} infra or skipped left out" if len(history) > len(nights) else ""
    )
    if len(nights) < min_nights:
        reason = f"{plural(len(nights), 'usable night')}, {min_nights} needed{left_out}"
        return Verdict("insufficient", reason, flaky_evidence=len(evidence), pass_rate=pass_rate)
    reason = f"passed {sum(n.passes for n in nights)} of {runs} runs over {len(nights)} nights{left_out}"
    if evidence:  # one blip
        reason += f"; failed single night {evidence[0].text} (one is not flaky)"
    return Verdict("stable", reason, flaky_evidence=len(evidence), pass_rate=pass_rate)


def in_quarantine(
    history: Sequence[Observation], *, clean_nights: int, infra: AbstractSet[dt.date] = frozenset()
) -> bool:
    """Whether a flaky test is still quarantined: fewer than `clean_nights` consecutive clean
    usable nights since its last flaky evidence. Stable, broken and insufficient tests never are."""
    if classify(history, infra=infra).state != "flaky":
        return False
    nights = _usable(history, infra)
    last = max((e.at for e in _evidence(nights)), default=0)
    if nights[-1].failed:  # a flaky test's failure tonight: a flake until it is broken
        last = len(nights) - 1
    run = best = 0
    for night in nights[last + 1 :]:
        run = run + 1 if night.clean else 0
        best = max(best, run)
    return best < clean_nights
