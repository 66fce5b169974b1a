"""Confirm a suite's failures before the night is judged (issue #26): the failing tests alone are
re-run on the same pins in the same environment, by the runner's backend. A test that passes on a
re-run is flaky with same-commit evidence (outcome "passed", attempts = the runs it took); one that
fails every attempt stays failed (attempts = every run). Bounded per suite by the catalog's
`confirm:` block: attempts, how many tests, how long in all.

The backend says how it re-runs (`Rerunner`): how it addresses a test (a pytest node id, a Bazel
target) and one round of runs. pytest re-runs round by round, only what still fails; Bazel does all
attempts in one round (--runs_per_test)."""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import dagster as dg

from nightly_assets.results import TestCase, TestReport
from nightly_assets.testing.clusters import night_clusters
from nightly_assets.testing.flakiness import is_wholesale
from nightly_assets.testing.report_metadata import MAX_FAILURE_ROWS  # as many as the failures table shows
from nightly_assets.testing.signatures import is_generic, signature
from nightly_assets.testing.streamed_cases import replaced_cases

if TYPE_CHECKING:  # the catalog imports the stage kinds, which import this module
    from nightly_assets.catalog.models import Confirm

_log = logging.getLogger(__name__)

# A host is the suspect when this many of the suite's failing tests that failed alike there (one
# failure signature, more than a bare comparison of values) passed once moved off it. Passing on a
# re-run alone says nothing of the host: a flaky test passes on a re-run wherever it runs, and on a
# flaky-heavy night three or more do. Several tests failing with one message on one machine and
# passing on another point at the machine (one or two may still share a message by chance).
SUSPECT_HOST_MIN = 3

# Runs one round: (addresses, round number from 1, runs of each test, seconds left) -> its report.
RunRound = Callable[[list[str], int, int, float], TestReport]


@dataclass(frozen=True)
class Rerunner:
    """How a backend re-runs failing tests: `address` names a test as its tool takes it (None: it
    cannot be re-run alone, with why in `why_not`), `run` re-runs one round of them."""

    address: Callable[[TestCase], str | None]
    run: RunRound
    runs_at_once: bool = False  # every attempt in one round (Bazel's --runs_per_test)
    why_not: str = "not a test that can be re-run alone (a collection error or a report fault)"
    # A pool of hosts: where round N runs and where the suite ran. A round goes to another host
    # first, so that a failure the machine caused passes there and the machine is named.
    host_of: Callable[[int], str] | None = None
    suite_host: str | None = None


@dataclass
class Confirmation:
    """What confirming a suite's failures did and cost."""

    report: TestReport  # the suite's report with the re-runs merged in
    attempts: int = 0  # re-runs of each test the catalog allows
    rerun: list[str] = field(default_factory=list)  # node ids re-run
    passed_on_rerun: dict[str, int] = field(default_factory=dict)  # node id -> attempts it took
    confirmed_failing: dict[str, int] = field(default_factory=dict)  # node id -> attempts, all failed
    not_rerun: dict[str, str] = field(default_factory=dict)  # node id -> why not (or not fully)
    runs: int = 0  # test runs spent
    seconds: float = 0.0
    junit: list[Path] = field(default_factory=list)  # each round's report, an artefact
    suite_host: str | None = None  # where the suite ran (a pool of hosts), else None
    round_hosts: dict[int, str] = field(default_factory=dict)  # round -> the host it ran on
    passed_on: dict[str, str] = field(default_factory=dict)  # node id -> the host it passed on
    signatures: dict[str, str] = field(default_factory=dict)  # node id -> its failure's signature

    @property
    def suspect_host(self) -> str | None:
        """The suite's host when the failures look like the machine's: at least SUSPECT_HOST_MIN
        failing tests with one failure signature passed once moved to another host."""
        return self.suite_host if self._moved_alike() else None

    def _moved_alike(self) -> list[str]:
        """The largest group of tests, failing with one telling signature on the suite's host and
        passing elsewhere, when it has SUSPECT_HOST_MIN or more; else []."""
        if self.suite_host is None:
            return []
        groups: dict[str, list[str]] = {}
        for test, host in self.passed_on.items():
            sig = self.signatures.get(test)
            if host != self.suite_host and sig is not None and not is_generic(sig):
                groups.setdefault(sig, []).append(test)
        largest = max(groups.values(), key=len, default=[])
        return largest if len(largest) >= SUSPECT_HOST_MIN else []

    def manifest(self) -> dict[str, Any]:
        return {
            "attempts": self.attempts,
            "rerun": self.rerun,
            "runs": self.runs,
            "seconds": round(self.seconds, 2),
            "passed_on_rerun": self.passed_on_rerun,
            "confirmed_failing": self.confirmed_failing,
            "not_rerun": dict(list(self.not_rerun.items())[:MAX_FAILURE_ROWS]),
            "not_rerun_count": len(self.not_rerun),
            "junit": [str(p) for p in self.junit],
            "suite_host": self.suite_host,
            "round_hosts": self.round_hosts,
            "passed_on": self.passed_on,
            "suspect_host": self.suspect_host,
            "suspect_signature": self.signatures[alike[0]] if (alike := self._moved_alike()) else None,
        }

    def metadata(self) -> dict[str, object]:
        """For the asset's metadata: the cost, and which test ended how (Markdown)."""
        if not (self.rerun or self.not_rerun):
            return {}
        return {
            "confirm/tests_rerun": len(self.rerun),
            "confirm/runs": self.runs,
            "confirm/seconds": dg.MetadataValue.float(round(self.seconds, 2)),
            "confirm/passed_on_rerun": len(self.passed_on_rerun),
            "confirm/confirmed_failing": len(self.confirmed_failing),
            "confirm/not_rerun": len(self.not_rerun),
            "confirmation": dg.MetadataValue.md(self.markdown()),
        }

    def markdown(self) -> str:
        rows = ["| test | confirmation | attempts |", "| --- | --- | --- |"]
        passed, failing = self.passed_on_rerun.items(), self.confirmed_failing.items()
        rows += [f"| {_cell(t)} | passed on confirmation re-run{self._on(t)} | {n} |" for t, n in passed]
        rows += [f"| {_cell(t)} | failed every attempt | {n} |" for t, n in failing]
        left_out = list(self.not_rerun.items())
        rows += [f"| {_cell(t)} | not re-run: {_cell(why)} | |" for t, why in left_out[:MAX_FAILURE_ROWS]]
        if len(left_out) > MAX_FAILURE_ROWS:
            rows.append(f"\n… and {len(left_out) - MAX_FAILURE_ROWS} more not re-run")
        head = (
            f"{len(self.rerun)} failing test(s) re-run (up to {self.attempts} attempt(s) each): "
            f"{self.runs} run(s) in {self.seconds:.1f} s"
        )
        if self.suspect_host is not None:
            head += f"\n\n**Suspect host: {self.suspect_host}** ({self._moved_words()})"
        return head + "\n\n" + "\n".join(rows)

    def summary(self) -> str:
        """For the stage's one-line detail: "; 1 passed on a confirmation re-run", or ""."""
        if not self.passed_on_rerun:
            return ""
        text = f"; {len(self.passed_on_rerun)} passed on a confirmation re-run"
        if self.suspect_host is not None:
            return f"{text}; suspect host {self.suspect_host} ({self._moved_words()})"
        return text

    def _on(self, test: str) -> str:
        host = self.passed_on.get(test)
        return f" on {host}" if host is not None and host != self.suite_host else ""

    def _moved_words(self) -> str:
        alike = self._moved_alike()
        hosts = sorted({self.passed_on[test] for test in alike})
        sig = self.signatures[alike[0]] if alike else ""
        return (
            f"{len(alike)} of {len(self.rerun)} failing tests, failing with `{sig}`, passed when re-run "
            f"on {', '.join(hosts)}"
        )


FAILING_FLAKY = "flaky and failing"  # a `judged_before` state: flaky, and failed on that night


def select(
    report: TestReport, confirm: Confirm, judged_before: Mapping[str, str] = MappingProxyType({})
) -> tuple[list[TestCase], dict[str, str]]:
    """The failing tests to re-run, and those left out with why. A collect-only report ran
    nothing; a wholesale failure (an infra failure, or a breakage of the whole suite) is not re-run.
    Past `max_tests`, the failures whose verdict tonight's re-run decides go first: tests with no
    verdict on the suite's previous night (`judged_before`: node id -> its state then,
    FAILING_FLAKY for a flaky test that failed that night), then the known-flaky ones in a failed
    streak (its attempts are what tells their breakage from their flakes), then the other
    known-flaky ones (one failed night never breaks a flaky test; a re-run only adds attempts),
    then those broken already (their alert went out: long-broken tests must not crowd out the
    new ones); the failures of an infra cluster (testing/clusters.py: a resource down for part of
    the suite) go last, as a re-run decides nothing for them (they are no broken tests, and a
    pass is no flaky evidence). A test that failed last night without a verdict (too new to tell,
    or one unconfirmed attempt) goes first: tonight may be the night it is judged."""
    clustered = {
        node_id
        for tests in night_clusters((c.node_id, signature(c.message)) for c in report.failures).values()
        for node_id in tests
    }
    rank = {FAILING_FLAKY: 1, "flaky": 2, "broken": 3}
    failures = sorted(
        report.failures, key=lambda c: (c.node_id in clustered, rank.get(judged_before.get(c.node_id, ""), 0))
    )
    if report.collect_only or not failures or confirm.attempts == 0:
        return [], {}
    ran = report.count("passed") + len(failures)
    if is_wholesale(ran, len(failures)):
        why = f"the suite failed wholesale ({len(failures)} of {ran} that ran): not a test's own failure"
        return [], {c.node_id: why for c in failures}
    chosen = failures[: confirm.max_tests]
    why = f"more failing tests than confirm.max_tests ({confirm.max_tests})"
    return chosen, {c.node_id: why for c in failures[confirm.max_tests :]}


def confirm_failures(
    report: TestReport,
    confirm: Confirm,
    rerunner: Rerunner | None,
    *,
    budget_s: float,
    where: str,
    judged_before: Mapping[str, str] = MappingProxyType({}),
    log: Callable[[str], None] = _log.info,
) -> Confirmation:
    """Re-run the report's failing tests as `confirm` allows and merge what they gave; `where`
    names the runner for the note when it cannot re-run (`rerunner` None)."""
    chosen, not_rerun = select(report, confirm, judged_before)
    done = Confirmation(report, attempts=confirm.attempts, not_rerun=not_rerun)
    done.suite_host = rerunner.suite_host if rerunner is not None else None
    if not chosen:
        return done
    if rerunner is None:
        done.not_rerun.update({c.node_id: f"not confirmed on this runner ({where})" for c in chosen})
        return done
    pending: dict[str, TestCase] = {}
    addresses: dict[str, str] = {}
    for case in chosen:
        address = rerunner.address(case)
        if address is None:
            done.not_rerun[case.node_id] = rerunner.why_not
        else:
            pending[case.node_id] = case
            addresses[case.node_id] = address
    done.rerun = list(pending)
    done.signatures = {t: sig for t, case in pending.items() if (sig := signature(case.message)) is not None}
    merged: dict[str, TestCase] = {}
    rounds, per_round = (1, confirm.attempts) if rerunner.runs_at_once else (confirm.attempts, 1)
    started = time.monotonic()
    runs_each = 0  # runs each pending test has had so far
    for number in range(1, rounds + 1):
        if not pending:
            break
        left = budget_s - (time.monotonic() - started)
        if left <= 0:
            _unfinished(done, merged, pending, runs_each, f"the re-runs' {budget_s:.0f} s were spent")
            break
        host = rerunner.host_of(number) if rerunner.host_of is not None else None
        if host is not None:
            done.round_hosts[number] = host
        log(
            f"confirming {len(pending)} failing test(s), re-run {number} of {rounds}"
            + (f" on {host}" if host is not None else "")
            + (f" ({per_round} runs each)" if per_round > 1 else "")
            + f": {', '.join(list(pending)[:5])}{' …' if len(pending) > 5 else ''}"
        )
        try:
            got = rerunner.run(list(dict.fromkeys(addresses[t] for t in pending)), number, per_round, left)
        except Exception as exc:  # whatever broke the re-run, the night is judged on the suite's own run
            _log.warning(f"{where}: confirmation re-run {number} failed", exc_info=True)
            _unfinished(done, merged, pending, runs_each, f"re-run {number} failed: {_first_line(exc)}")
            break
        done.junit.extend(Path(f) for f in got.source_files)
        outcomes = _outcomes_by_test(got.cases)
        for test_id, case in list(pending.items()):
            seen = outcomes.get(test_id, [])
            if not seen:
                done.not_rerun[test_id] = f"not in re-run {number}'s report (skipped or not collected)"
                if runs_each:
                    merged[test_id] = dataclasses.replace(case, attempts=case.attempts + runs_each)
                done.runs += runs_each
                del pending[test_id]
            elif "passed" in seen:
                took = case.attempts + runs_each + seen.index("passed") + 1
                # the failure's message stays: its signature tells an infra cluster from a flake
                merged[test_id] = dataclasses.replace(case, outcome="passed", attempts=took)
                done.passed_on_rerun[test_id] = took
                if host is not None:
                    done.passed_on[test_id] = host
                done.runs += took - case.attempts
                del pending[test_id]
        runs_each += per_round
    else:  # every round ran: what still fails failed every attempt
        for test_id, case in pending.items():
            merged[test_id] = dataclasses.replace(case, attempts=case.attempts + runs_each)
            done.confirmed_failing[test_id] = case.attempts + runs_each
            done.runs += runs_each
    done.seconds = time.monotonic() - started
    if done.suspect_host is not None:
        # The suspect host's failures are the machine's, not the tests': a test that failed alike
        # there and passed once moved is a plain pass (not flaky evidence); the manifest keeps
        # where it failed.
        for test_id in done._moved_alike():
            merged[test_id] = dataclasses.replace(merged[test_id], attempts=1)
    done.report = dataclasses.replace(
        report,
        cases=replaced_cases(report.cases, merged),  # type: ignore[arg-type]  # streamed stays streamed
        source_files=(*report.source_files, *(str(p) for p in done.junit)),
    )
    log(
        f"confirmation: {len(done.passed_on_rerun)} passed on re-run, {len(done.confirmed_failing)} "
        f"failed every attempt, {len(done.not_rerun)} not re-run; {done.runs} run(s) in {done.seconds:.1f} s"
        + (f"; suspect host {done.suspect_host} ({done._moved_words()})" if done.suspect_host else "")
    )
    return done


def pytest_node_id(case: TestCase, root: Path) -> str | None:
    """The pytest node id of a JUnit case, relative to `root` (pytest's rootdir): pytest writes the
    classname as the node id's path with "/" as "." and no ".py", classes appended, so the longest
    prefix that is a test file under `root` is the file. None: no such file (a collection error
    has no classname)."""
    parts = case.classname.split(".") if case.classname else []
    for cut in range(len(parts), 0, -1):
        path = "/".join(parts[:cut]) + ".py"
        if (root / path).is_file():
            return "::".join([path, *parts[cut:], case.name])
    return None


def _outcomes_by_test(cases: Sequence[TestCase]) -> dict[str, list[str]]:
    """Each test's outcomes in the re-run, in report order (several under --runs_per_test);
    skipped or collected ones are no evidence either way."""
    found: dict[str, list[str]] = {}
    for case in cases:
        if case.outcome in ("passed", "failed", "error"):
            found.setdefault(case.node_id, []).append(case.outcome)
    return found


def _unfinished(
    done: Confirmation, merged: dict[str, TestCase], pending: dict[str, TestCase], runs_each: int, why: str
) -> None:
    """Tests whose confirmation stopped short: not confirmed, and why in `not_rerun`; they stay
    failed, their attempts counting the re-runs that failed before the stop."""
    for test_id, case in pending.items():
        done.not_rerun[test_id] = why + (f" after {runs_each} failed re-run(s)" if runs_each else "")
        if runs_each:
            merged[test_id] = dataclasses.replace(case, attempts=case.attempts + runs_each)
        done.runs += runs_each
    pending.clear()


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return (text.splitlines()[0] if text else type(exc).__name__)[:300]


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")
