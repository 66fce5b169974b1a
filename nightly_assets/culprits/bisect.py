"""The first bad commit of a range, found by binary search over probes (as `git bisect` does, with
`skip` for a commit that cannot be judged: it does not build, the test is missing there).

The range is the commits after the last good night's pin up to the first bad night's, oldest
first. The bad end is probed first: a failure that does not reproduce there (a flake, the machine)
names no commit. Probes are cached, so a commit is never built twice."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

Verdict = Literal["good", "bad", "skip"]
Outcome = Literal["found", "not reproduced", "inconclusive"]


@dataclass
class Search:
    """Where a bisection ended: the first bad commit (found), or why there is none."""

    outcome: Outcome
    first_bad: str | None = None
    # every commit probed, in the order probed, with its verdict and one line of why
    probes: list[tuple[str, Verdict, str]] = field(default_factory=list)
    # inconclusive: the commits the first bad one is among (skipped ones left no narrower range)
    candidates: list[str] = field(default_factory=list)
    reason: str = ""  # why, when the good night's commit did not pass either

    def describe(self) -> str:
        if self.outcome == "found":
            return f"first bad commit {self.first_bad} ({len(self.probes)} probes)"
        if self.reason:
            return self.reason
        if self.outcome == "not reproduced":
            return f"the failure does not reproduce at the bad commit ({self.probes[0][2]})"
        if not self.candidates:
            return (
                f"the bad commit itself could not be probed ({self.probes[0][2]})"
                if self.probes
                else "no commits"
            )
        named = ", ".join(c[:10] for c in self.candidates)
        return f"one of {len(self.candidates)} commits ({named}): the ones between could not be judged"


Probe = Callable[[str], tuple[Verdict, str]]


def first_bad_commit(
    commits: Sequence[str], probe: Probe, *, good: str | None = None, max_probes: int = 32
) -> Search:
    """Bisect `commits` (oldest first; the last one is the bad night's pin; `good`, the good night's
    pin, is before the first) with `probe(commit) -> (verdict, why)`. When the search ends next to
    the good end, `good` is probed too: a failure there as well is nothing this range did."""
    search = Search("inconclusive")
    seen: dict[str, Verdict] = {}

    def judge(commit: str) -> Verdict:
        if commit not in seen:
            verdict, why = probe(commit)
            seen[commit] = verdict
            search.probes.append((commit, verdict, why))
        return seen[commit]

    if not commits:
        return search
    at_bad_end = judge(commits[-1])
    if at_bad_end != "bad":  # a skip there: nothing to compare the others with
        search.outcome = "not reproduced" if at_bad_end == "good" else "inconclusive"
        return search
    lo, hi = -1, len(commits) - 1  # commits[lo] is good (-1: the good night's pin), commits[hi] bad
    while hi - lo > 1 and len(search.probes) < max_probes:
        middle = _untried_near((lo + hi) // 2, lo, hi, seen, commits)
        if middle is None:
            break  # every commit between is skipped
        verdict = judge(commits[middle])
        if verdict == "bad":
            hi = middle
        elif verdict == "good":
            lo = middle
    if hi - lo == 1 and lo == -1 and good is not None:
        at_good_end = judge(good)
        if at_good_end != "good":  # fails (or cannot run) at the good night's commit now too
            search.outcome = "not reproduced" if at_good_end == "bad" else "inconclusive"
            search.reason = f"at the good night's commit too ({search.probes[-1][2]}): not this range"
            return search
    if hi - lo == 1:
        search.outcome, search.first_bad = "found", commits[hi]
    else:
        search.candidates = [c for c in commits[lo + 1 : hi + 1]]
    return search


def _untried_near(
    middle: int, lo: int, hi: int, seen: dict[str, Verdict], commits: Sequence[str]
) -> int | None:
    """The commit between lo and hi nearest `middle` that is not known to be skipped."""
    for distance in range(hi - lo):
        for index in (middle - distance, middle + distance):
            if lo < index < hi and seen.get(commits[index]) != "skip":
                return index
    return None
