"""The GitHub client against the fake GitHub API: conditional requests, pagination, label actors,
permissions, statuses, comments, issues without duplicates, and errors that never show the token."""

from __future__ import annotations

import datetime
import socket

import pytest

from nightly_assets.github.client import GitHubClient, GitHubError, Issue
from nightly_assets.github.resources import GitHubResource
from nightly_assets_tests.peers.github_api import FakeGitHubApi
from nightly_assets_tests.peers.process import free_port

pytestmark = pytest.mark.github

SHA_A = "a" * 40
SHA_B = "b" * 40


@pytest.fixture
def client(github_api: FakeGitHubApi) -> GitHubClient:
    return GitHubClient(github_api.url, github_api.repo, github_api.token, timeout_s=5)


def test_open_pulls_returns_the_pulls_and_sends_githubs_headers(github_api, client):
    github_api.add_pull(1, SHA_A, "alice", labels=("ci:run",), ref="alice/fix")
    github_api.add_pull(2, SHA_B, "bob")

    pulls, etag = client.open_pulls()

    assert pulls is not None and etag and etag.startswith('W/"')
    assert [p.number for p in pulls] == [2, 1]  # most recently updated first
    first = pulls[1]
    assert (first.head_sha, first.head_ref, first.base_ref) == (SHA_A, "alice/fix", "main")
    assert (first.labels, first.author) == (("ci:run",), "alice")
    assert first.html_url == f"https://github.com/{github_api.repo}/pull/1"
    assert first.updated_at.endswith("Z")
    headers = github_api.last_headers
    assert headers["Accept"] == "application/vnd.github+json"
    assert headers["X-GitHub-Api-Version"] == "2022-11-28"


def test_an_unchanged_pull_list_is_one_304(github_api, client):
    github_api.add_pull(1, SHA_A, "alice")
    _, etag = client.open_pulls()
    calls, seen = client.calls, len(github_api.requests)

    pulls, again = client.open_pulls(etag)

    assert (pulls, again) == (None, etag)
    assert client.calls == calls + 1
    assert github_api.requests[seen:] == [("GET", f"/repos/{github_api.repo}/pulls", 304)]


@pytest.mark.parametrize("change", ["push", "label", "new pull"])
def test_a_changed_pull_list_is_read_again(github_api, client, change):
    github_api.add_pull(1, SHA_A, "alice")
    github_api.add_pull(2, SHA_B, "bob")
    _, etag = client.open_pulls()

    if change == "push":
        github_api.push(1, "c" * 40)
    elif change == "label":
        github_api.add_label(1, "ci:run", "maintainer")
    else:
        github_api.add_pull(3, "d" * 40, "carol")
    pulls, new_etag = client.open_pulls(etag)

    assert pulls is not None and new_etag not in (None, etag)
    assert github_api.requests[-1][2] == 200
    by_number = {p.number: p for p in pulls}
    if change == "push":
        assert by_number[1].head_sha == "c" * 40 and pulls[0].number == 1
    elif change == "label":
        assert by_number[1].labels == ("ci:run",) and pulls[0].number == 1
    else:
        assert sorted(by_number) == [1, 2, 3] and pulls[0].number == 3


def test_open_pulls_follows_every_page(github_api, client):
    for number in range(1, 151):
        github_api.add_pull(number, f"{number:040x}", f"user{number}")
    github_api.close_pull(7)

    pulls, etag = client.open_pulls()

    assert pulls is not None and etag
    assert sorted(p.number for p in pulls) == [n for n in range(1, 151) if n != 7]
    assert {p.head_sha for p in pulls if p.number == 150} == {f"{150:040x}"}
    assert [status for _, _, status in github_api.requests] == [200, 200]  # 100 + 49
    assert client.calls == 2


def test_label_actor_is_the_last_to_apply_the_label_across_pages(github_api, client):
    github_api.add_pull(5, SHA_A, "alice")
    github_api.add_label(5, "ci:run", "alice")
    for round_ in range(60):  # 120 events of another label: the answer spans two pages
        github_api.add_label(5, "noise", f"bot{round_}")
        github_api.remove_label(5, "noise", f"bot{round_}")
    github_api.remove_label(5, "ci:run", "maintainer")
    github_api.add_label(5, "ci:run", "maintainer")
    github_api.add_label(5, "other", "mallory")  # a later label, not the one asked about

    assert client.label_actor(5, "ci:run") == "maintainer"
    assert client.label_actor(5, "missing") is None
    events_path = f"/repos/{github_api.repo}/issues/5/events"
    assert [path for _, path, _ in github_api.requests].count(events_path) == 4  # 2 pages, twice


def test_permission_reads_the_role_and_404_is_none(github_api, client):
    github_api.set_permission("owner", "admin")
    github_api.set_permission("keeper", "maintain")
    github_api.set_permission("triager", "triage")
    github_api.set_permission("reader", "read")

    assert client.permission("owner") == "admin"
    assert client.permission("keeper") == "maintain"  # role_name, not the legacy "write"
    assert client.permission("triager") == "triage"
    assert client.permission("reader") == "read"
    assert client.permission("stranger") == "none"
    assert github_api.requests[-1] == (
        "GET",
        f"/repos/{github_api.repo}/collaborators/stranger/permission",
        404,
    )


def test_comment_and_status_land_on_github(github_api, client):
    github_api.add_pull(3, SHA_A, "alice")

    url = client.comment(3, "nightly: started")
    client.set_status(SHA_A, "pending", context="nightly/ci", description="queued", target_url="http://d/r/1")
    client.set_status(SHA_A, "success", context="nightly/ci", description="passed")

    assert github_api.comments == {3: ["nightly: started"]}
    assert url.startswith(f"https://github.com/{github_api.repo}/pull/3#issuecomment-")
    assert github_api.statuses[SHA_A] == [
        {"state": "pending", "context": "nightly/ci", "description": "queued", "target_url": "http://d/r/1"},
        {"state": "success", "context": "nightly/ci", "description": "passed", "target_url": None},
    ]


def test_status_description_is_cut_to_githubs_limit(github_api, client):
    github_api.add_pull(3, SHA_A, "alice")
    long = "x" * 200

    client.set_status(SHA_A, "failure", context="nightly/ci", description=long)  # GitHub: 422 above 140

    (status,) = github_api.statuses[SHA_A]
    assert len(status["description"]) == 140 and long.startswith(status["description"][:-1])


def test_status_state_is_checked_before_any_call(client):
    with pytest.raises(ValueError, match="'passed'"):
        client.set_status(SHA_A, "passed", context="c", description="d")
    assert client.calls == 0


def test_open_or_update_issue_opens_once_then_comments(github_api, client):
    labels = ("nightly", "flaky")
    github_api.add_pull(1, SHA_A, "alice", labels=labels, body="<!-- nightly:tpu -->")  # a PR: skipped
    closed = github_api.add_issue("old", "<!-- nightly:tpu -->", labels, state="closed")

    first, created = client.open_or_update_issue(
        title="tpu fails", body="night 1", marker="nightly:tpu", labels=labels
    )
    second, created_again = client.open_or_update_issue(
        title="tpu still fails", body="night 2", marker="nightly:tpu", labels=labels
    )

    assert (created, created_again) == (True, False)
    assert second == first and first.number not in (1, closed.number)
    opened = [issue for issue in github_api.issues if issue.state == "open"]
    assert [issue.number for issue in opened] == [first.number]
    assert opened[0].title == "tpu fails" and opened[0].labels == list(labels)
    assert opened[0].body == "night 1\n\n<!-- nightly:tpu -->"
    assert github_api.comments == {first.number: ["night 2"]}
    assert first.html_url == f"https://github.com/{github_api.repo}/issues/{first.number}"


def test_open_or_update_issue_needs_every_label_and_the_marker(github_api, client):
    other_marker = github_api.add_issue("x", "<!-- nightly:gpu -->", ("nightly",))
    fewer_labels = github_api.add_issue("y", "<!-- nightly:tpu -->", ("nightly",))

    issue, created = client.open_or_update_issue(
        title="tpu", body="see <!-- nightly:tpu --> here", marker="nightly:tpu", labels=("nightly", "tpu")
    )

    assert created and issue.number not in (other_marker.number, fewer_labels.number)
    assert issue == Issue(
        issue.number, "tpu", issue.html_url, "see <!-- nightly:tpu --> here"
    )  # not appended twice
    assert github_api.comments == {}


def test_a_bad_token_is_githubs_message_without_the_token(github_api):
    secret = "ghp_WrongToken0123456789"
    client = GitHubClient(github_api.url, github_api.repo, secret)

    with pytest.raises(GitHubError) as raised:
        client.open_pulls()

    text = str(raised.value)
    assert "Bad credentials" in text and "401" in text and "GET /repos/acme/sglang/pulls" in text
    assert secret not in text and secret not in repr(raised.value)
    assert raised.value.status == 401


def test_no_token_is_refused_too(github_api):
    with pytest.raises(GitHubError, match="401: Bad credentials"):
        GitHubClient(github_api.url, github_api.repo, None).permission("alice")


def test_rate_limit_says_when_it_resets(github_api, client):
    github_api.fail_next(403, "API rate limit exceeded for user ID 1.", rate_limited=True)

    with pytest.raises(GitHubError) as raised:
        client.open_pulls()

    reset = datetime.datetime.fromtimestamp(github_api.rate_limit_reset, datetime.UTC)
    text = str(raised.value)
    assert "rate limit" in text and "API rate limit exceeded for user ID 1." in text
    assert f"{reset:%Y-%m-%d %H:%M:%S} UTC" in text
    assert github_api.token not in text
    assert client.open_pulls()[0] == []  # one request failed, the next is served


def test_a_validation_error_names_the_call_and_githubs_errors(github_api, client):
    with pytest.raises(GitHubError) as raised:
        client.set_status("f" * 40, "success", context="c", description="d")  # no such commit

    assert "POST /repos/acme/sglang/statuses/" in str(raised.value)
    assert "422: No commit found for SHA" in str(raised.value)


def test_an_unreachable_api_names_the_url():
    url = f"http://127.0.0.1:{free_port()}"
    client = GitHubClient(url, "acme/sglang", "ghp_secret_value", timeout_s=2)

    with pytest.raises(GitHubError) as raised:
        client.comment(1, "hi")

    text = str(raised.value)
    assert url in text and "POST /repos/acme/sglang/issues/1/comments" in text
    assert "refused" in text.lower()
    assert "ghp_secret_value" not in text


def test_a_silent_api_is_a_timeout_naming_the_url():
    with socket.create_server(("127.0.0.1", 0)) as silent:  # listens, never answers
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        client = GitHubClient(url, "acme/sglang", "ghp_secret_value", timeout_s=0.5)

        with pytest.raises(
            GitHubError, match=r"GET /repos/acme/sglang/pulls: no answer .* in 0\.5 s"
        ) as raised:
            client.open_pulls()

    assert url in str(raised.value) and raised.value.status is None


@pytest.mark.parametrize("repo", ["acme", "acme/", "/sglang", "acme/sg lang", "a/b/c", "acme/.."])
def test_an_invalid_repo_is_refused_by_name(repo):
    with pytest.raises(ValueError, match=repr(repo).replace(".", r"\.")):
        GitHubClient("https://api.github.com", repo, None)


def test_repr_hides_the_token():
    client = GitHubClient("https://api.github.com", "acme/sglang", "ghp_secret_value")
    assert "ghp_secret_value" not in repr(client)
    assert "acme/sglang" in repr(client) and "***" in repr(client)


def test_the_resource_builds_a_client_for_its_repo(github_api):
    resource = GitHubResource(api_url=github_api.url, repo=github_api.repo, token=github_api.token)

    client = resource.client()
    github_api.set_permission("alice", "write")

    assert client.repo == github_api.repo and client.permission("alice") == "write"
