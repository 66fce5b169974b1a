"""Seed 003's tier 3 and its failure issue against a fake GitHub API: the label sensor (trust, once per
head commit, one call on an idle tick), the PR job on a TPU VM with its status and comment, and
failing nights that update one issue."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import dagster as dg
import pytest

from nightly_assets.definitions import build_definitions
from nightly_assets.github.client import GitHubClient
from nightly_assets.resources import resources_for
from nightly_assets.results import NightKey
from nightly_assets_tests.catalog_files import edit_pipeline
from nightly_assets_tests.git_repo import git
from nightly_assets_tests.peers.github_api import FakeGitHubApi
from nightly_assets_tests.peers.tpu_api import FakeTpuApi
from nightly_assets_tests.tpu_harness import KEY, make_sglang_repo, tpu_catalog

pytestmark = [pytest.mark.github]

LABEL = "run-tpu-tests"
MAINTAINER, OUTSIDER, ALLOWED = "maria", "olly", "carol"
CONTEXT = "nightly/tpu"


@pytest.fixture
def pr_setup(nightly_home, tmp_path, monkeypatch, github_api: FakeGitHubApi, tpu_api, sshd, vm_python):
    """The catalog's `tpu` pipeline on the peers, reporting to the fake GitHub's repository; the
    sources hold a passing head (refs/pull/7/head) and a failing one (refs/pull/8/head)."""
    repo, good = make_sglang_repo(tmp_path / "sglang")
    (repo / "test" / "srt" / "test_score_api.py").write_text(
        (repo / "test" / "srt" / "test_score_api.py")
        .read_text()
        .replace("scoreapi.score(2), 4", "scoreapi.score(2), 5")
    )
    git(repo, "commit", "-qam", "break the score")
    bad = git(repo, "rev-parse", "HEAD")
    git(repo, "update-ref", "refs/pull/7/head", good)
    git(repo, "update-ref", "refs/pull/8/head", bad)
    git(repo, "reset", "-q", "--hard", good)  # main stays at the passing commit
    catalog = tpu_catalog(tmp_path, monkeypatch, repo, vm_python, tpu_api, sshd, github_api.repo)
    edit_pipeline(catalog, "tpu", lambda document: document["github"].update(allow=[ALLOWED]))
    monkeypatch.setenv("NIGHTLY_GITHUB_API_URL", github_api.url)
    monkeypatch.setenv("NIGHTLY_GITHUB_TOKEN", github_api.token)
    github_api.set_permission(MAINTAINER, "write")
    github_api.set_permission(OUTSIDER, "read")
    (tmp_path / "dagster_home").mkdir()
    with dg.instance_for_test(temp_dir=str(tmp_path / "dagster_home")) as instance:
        yield build_definitions(catalog), instance, good, bad


def tick(defs: dg.Definitions, instance: dg.DagsterInstance, github_api: FakeGitHubApi, cursor: str | None):
    """One sensor evaluation: (run requests, new cursor, API calls it made)."""
    sensor = defs.resolve_sensor_def("tpu_pr_label")
    before = len(github_api.requests)
    resources = {"github": resources_for("local", Path("/nonexistent"))["github"]}
    with dg.build_sensor_context(cursor=cursor, instance=instance, resources=resources) as context:
        result = sensor(context)
    assert isinstance(result, dg.SensorResult)
    return list(result.run_requests or []), (result.cursor or cursor), len(github_api.requests) - before


def test_the_label_runs_once_per_head_commit_and_only_when_a_maintainer_applied_it(
    pr_setup, github_api: FakeGitHubApi
) -> None:
    defs, instance, good, bad = pr_setup
    github_api.add_pull(7, good, OUTSIDER, labels=(LABEL,), ref="feature/$(touch /tmp/pwned);`id`")
    github_api.add_pull(9, "c" * 40, "someone")  # no label: never looked at
    requests, cursor, calls = tick(defs, instance, github_api, None)
    assert requests == [] and calls == 3  # the list, who labelled #7, their permission

    requests, cursor, calls = tick(defs, instance, github_api, cursor)
    assert requests == [] and calls == 1  # idle: one conditional request, answered 304
    assert github_api.requests[-1][2] == 304

    github_api.remove_label(7, LABEL, OUTSIDER)
    github_api.add_label(7, LABEL, MAINTAINER)
    requests, cursor, calls = tick(defs, instance, github_api, cursor)
    assert [r.run_key for r in requests] == [f"pr-7-{good}"]
    config = requests[0].run_config["ops"]["tpu_pr_tests"]["config"]
    assert config == {"pr": 7, "sha": good, "labeled_by": MAINTAINER}
    assert requests[0].tags["nightly/pr"] == "7"

    with GitHubClient(github_api.url, github_api.repo, github_api.token) as client:
        client.comment(7, "unrelated chatter")  # the PR changed, its head did not
    requests, cursor, calls = tick(defs, instance, github_api, cursor)
    assert requests == [] and calls == 1

    requests, cursor, calls = tick(defs, instance, github_api, cursor)
    assert requests == [] and calls == 1

    github_api.push(7, bad)
    requests, cursor, calls = tick(defs, instance, github_api, cursor)
    assert [r.run_key for r in requests] == [f"pr-7-{bad}"]
    assert not Path("/tmp/pwned").exists()


def test_an_allow_listed_login_needs_no_write_access(pr_setup, github_api: FakeGitHubApi) -> None:
    defs, instance, good, _ = pr_setup
    github_api.add_pull(7, good, ALLOWED, labels=(LABEL,))
    requests, _, calls = tick(defs, instance, github_api, None)
    assert [r.run_key for r in requests] == [f"pr-7-{good}"]
    assert calls == 2  # the list and the labeler; no permission lookup for the allow-list


@pytest.mark.tpu
@pytest.mark.ssh
def test_the_pr_job_tests_the_head_on_a_vm_and_reports_status_and_comment(
    pr_setup, github_api: FakeGitHubApi, tpu_api: FakeTpuApi, nightly_home: Path
) -> None:
    defs, instance, good, bad = pr_setup
    github_api.add_pull(7, good, MAINTAINER, labels=(LABEL,))
    github_api.add_pull(8, bad, MAINTAINER, labels=(LABEL,))
    requests, _, _ = tick(defs, instance, github_api, None)
    assert {r.run_key for r in requests} == {f"pr-7-{good}", f"pr-8-{bad}"}
    job = defs.resolve_job_def("tpu_pr")
    results = {
        r.tags["nightly/pr"]: job.execute_in_process(
            run_config=r.run_config, instance=instance, tags=r.tags, raise_on_error=False
        )
        for r in requests
    }
    assert results["7"].success and not results["8"].success
    assert [s["state"] for s in github_api.statuses[good]] == ["pending", "success"]
    assert [s["state"] for s in github_api.statuses[bad]] == ["pending", "failure"]
    assert {s["context"] for s in github_api.statuses[good] + github_api.statuses[bad]} == {CONTEXT}
    [passed] = github_api.comments[7]
    [failed] = github_api.comments[8]
    assert passed.startswith("✅ TPU tests passed: 2/2") and good[:12] in passed
    assert failed.startswith("❌ TPU tests failed: 1 of 2") and "test_score" in failed
    store = resources_for("local", nightly_home)["warehouse"].store()
    today = dt.datetime.now(dt.UTC).date()
    [cost] = store.costs(NightKey("tpu", today, "pr-7"))
    assert cost.ended == "completed" and cost.cost_usd > 0
    assert store.suite_counts(NightKey("tpu", today, "pr-8"))["tests_tpu"]["failed"] == 1
    assert tpu_api.node_names() == []
    for result in results.values():  # the token is an EnvVar: not in run config, logs or metadata
        logged = [repr(e) for e in instance.all_logs(result.run_id)]
        logged.append(repr(instance.get_run_by_id(result.run_id)))
        assert not [text for text in logged if github_api.token in text]


@pytest.mark.tpu
@pytest.mark.ssh
def test_failing_nights_open_one_issue_and_then_update_it(
    tpu_night, github_api: FakeGitHubApi, monkeypatch
) -> None:
    monkeypatch.setenv("NIGHTLY_GITHUB_API_URL", github_api.url)
    monkeypatch.setenv("NIGHTLY_GITHUB_TOKEN", github_api.token)
    for night in (KEY.night, KEY.night + dt.timedelta(days=1)):
        _outcome, checks = tpu_night(
            expected=5, key=NightKey("tpu", night, KEY.target), github_repo=github_api.repo
        )
        assert not checks["tests_passed"]
    [issue] = github_api.issues
    assert issue.state == "open" and set(issue.labels) == {"ci-failure", "tpu-tests"}
    assert "2026-11-03" in issue.body and "nightly-assets:failure:tpu:v6e-1" in issue.body
    [update] = github_api.comments[issue.number]
    assert "2026-11-04" in update
    assert "ghp_" not in issue.body + update  # the token is nowhere near what we post
