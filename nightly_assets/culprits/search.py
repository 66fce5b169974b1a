"""One culprit search: which repository's change made a subject (failing tests, a regressed
benchmark) bad between its last good and first bad night, then the bisection of that
repository's commits (bisect.py) with probes (probes.py)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from nightly_assets.builds.resources import PythonBuildResource
from nightly_assets.catalog.models import Pipeline
from nightly_assets.culprits.bisect import Search, Verdict, first_bad_commit
from nightly_assets.culprits.probes import Chain, NotSearchable, Prober, probe_benchmark, probe_tests
from nightly_assets.results import NightKey
from nightly_assets.sources.resources import SHA, GitSourcesResource, SourceError
from nightly_assets.testing.resources import LocalTestRunnerResource
from nightly_assets.warehouse.rows import Culprit

if TYPE_CHECKING:
    from nightly_assets.culprits.params import CulpritSearchParams
    from nightly_assets.warehouse.store import Warehouse


MAX_COMMITS = 1000  # a longer range is no night's worth of change


@dataclass(frozen=True)
class Subject:
    """What went bad: tests of a suite stage, or a benchmark with its good and bad levels."""

    stage: str | None
    last_good: dt.date
    first_bad: dt.date
    tests: list[str] = field(default_factory=list)
    benchmark: tuple[str, float, float] | None = None  # name, level before, level after

    @property
    def label(self) -> str:
        if self.benchmark is not None:
            return f"benchmark {self.benchmark[0]}"
        return f"{self.stage}: {', '.join(self.tests)}"


@dataclass
class Searcher:
    pipeline: Pipeline
    store: Warehouse
    key: NightKey
    workdir: Path
    git: GitSourcesResource
    builder: PythonBuildResource
    test_runner: LocalTestRunnerResource
    params: CulpritSearchParams
    log: Callable[[str], None]

    def search(self, subject: Subject) -> Culprit:
        try:
            return self._search(subject)
        except NotSearchable as exc:
            return Culprit(subject.label, "not searchable", None, None, None, None, str(exc), [])
        except SourceError as exc:
            return Culprit(subject.label, "inconclusive", None, None, None, None, str(exc), [])

    def _search(self, subject: Subject) -> Culprit:
        stage = subject.stage or self.pipeline.stages_of("benchmarks")[0].name
        chain = Chain.of(self.pipeline, stage)
        good, bad = self._pins(subject.last_good), self._pins(subject.first_bad)
        urls = {r.name: r.url for r in self.pipeline.repositories}
        prober = Prober(chain, self.workdir / "probes", self.git, self.builder, urls)
        timeout_s = self.params.timeout_minutes * 60

        def probe(pins: Mapping[str, str]) -> tuple[Verdict, str]:
            self.log(
                f"{subject.label}: probing {', '.join(f'{r}@{s[:10]}' for r, s in sorted(pins.items()))}"
            )
            if subject.benchmark is not None:
                name, before, after = subject.benchmark
                return probe_benchmark(prober, pins, name, before, after, timeout_s)
            return probe_tests(prober, pins, subject.tests, timeout_s, self.test_runner)

        changed = sorted(r for r in bad if good.get(r) != bad[r])
        if not changed:
            why = f"no pinned commit changed between {subject.last_good} and {subject.first_bad}"
            return Culprit(subject.label, "not searchable", None, None, None, None, why, [])
        repo = changed[0]
        if len(changed) > 1:  # the repository whose return to its good commit makes it pass
            blamed = (
                [r for r in changed if probe({**bad, r: good[r]})[0] == "good"]
                if all(r in good for r in changed)
                else []
            )
            if len(blamed) != 1:
                names = ", ".join(changed)
                why = f"{len(changed)} repositories changed ({names}); reverting one alone does not tell"
                return Culprit(subject.label, "inconclusive", None, None, None, None, why, [])
            repo = blamed[0]
        commits = self.git.rev_list(repo, urls[repo], good.get(repo), bad[repo], limit=MAX_COMMITS + 1)
        if len(commits) > MAX_COMMITS:
            why = f"more than {MAX_COMMITS} commits of {repo} between the two nights"
            return Culprit(subject.label, "inconclusive", repo, None, None, None, why, [])
        found = first_bad_commit(
            commits,
            lambda sha: probe({**bad, repo: sha}),
            good=good.get(repo),
            max_probes=self.params.max_probes,
        )
        return self._culprit(subject, repo, urls[repo], found)

    def _culprit(self, subject: Subject, repo: str, url: str, found: Search) -> Culprit:
        probes = [{"commit": c, "verdict": v, "why": why} for c, v, why in found.probes]
        if found.first_bad is None:
            return Culprit(subject.label, found.outcome, repo, None, None, None, found.describe(), probes)
        [commit] = self.git.commits_between(repo, url, None, found.first_bad, 1)
        return Culprit(
            subject.label, "found", repo, commit.sha, commit.author, commit.subject, found.describe(), probes
        )

    def _pins(self, night: dt.date) -> dict[str, str]:
        row = self.store.night(NightKey(self.key.pipeline, night, self.key.target))
        if row is None or not row.pins:
            raise SourceError(f"night {night} recorded no pinned commits to search from")
        for repo, sha in row.pins.items():
            if not SHA.match(sha):
                raise SourceError(f"night {night}: {repo} pinned {sha!r}, not a commit SHA")
        return dict(row.pins)
