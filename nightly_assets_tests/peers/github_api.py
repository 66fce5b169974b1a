"""A fake of the GitHub REST API for one repository, in GitHub's own JSON shapes: pull requests,
issues (PRs included, one number space), issue events, comments, collaborator permissions,
commit statuses and new issues.

Like GitHub it wants ``Authorization: Bearer <token>`` (401 "Bad credentials" otherwise),
paginates with ``per_page``/``page`` and an absolute ``Link`` rel="next", answers a GET with a
weak ``ETag`` (a hash of the body) and a matching ``If-None-Match`` with 304 and no body, and
validates what a POST sends (422 "Validation Failed"). Time is a fake clock that ticks once per
change, so ``updated_at`` orders changes strictly.

Tests script the repository (``add_pull``, ``push``, ``add_label``, ``set_permission``,
``fail_next`` ...) and read back ``comments``, ``statuses``, ``issues`` and ``requests``.
"""

from __future__ import annotations

import contextlib
import datetime
import hashlib
import itertools
import json
import re
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from email.message import Message
from typing import Any
from urllib.parse import parse_qsl, urlencode

import pytest

from nightly_assets_tests.peers.http_api import FakeHttpServer, Request, Response

WEB = "https://github.com"
DOCS = "https://docs.github.com/rest"
RATE_LIMIT = 5000
ROLES = ("admin", "maintain", "write", "triage", "read", "none")
# The collaborator permission endpoint's "permission" holds the legacy roles only.
LEGACY_PERMISSION = {"maintain": "write", "triage": "read"}
STATUS_STATES = ("pending", "success", "failure", "error")
_EPOCH = datetime.datetime(2025, 1, 1, tzinfo=datetime.UTC)
_REPO_PATH = re.compile(r"/repos/(?P<owner>[^/]+)/(?P<name>[^/]+)(?P<rest>/.*)?")


class ApiError(Exception):
    def __init__(
        self,
        status: int,
        message: str,
        *,
        errors: list[dict[str, Any]] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.message, self.errors, self.headers = status, message, errors, dict(headers or {})


@dataclass
class FakeIssue:
    """An issue or, with ``head_sha`` set, a pull request."""

    number: int
    title: str
    body: str
    author: str
    labels: list[str]
    created_at: str
    updated_at: str
    state: str = "open"
    closed_at: str | None = None
    comments: list[str] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)
    head_sha: str | None = None
    head_ref: str | None = None
    base_ref: str | None = None

    @property
    def is_pull(self) -> bool:
        return self.head_sha is not None


@dataclass
class _Failure:
    status: int
    message: str
    rate_limited: bool


@dataclass
class FakeGitHubApi:
    """The fake server; everything below ``bot_login`` is the repository's state (reset per test)."""

    repo: str = "acme/sglang"
    token: str = "ghp_FakeToken0123456789abcdefghijklmnopq"
    bot_login: str = "nightly-bot"  # the token's owner: the author of what the API creates
    items: dict[int, FakeIssue] = field(default_factory=dict)  # issues and PRs by number
    statuses: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # sha -> statuses, in order
    permissions: dict[str, str] = field(default_factory=dict)  # login -> role; unknown logins: 404
    requests: list[tuple[str, str, int]] = field(default_factory=list)  # (method, path, status)
    last_headers: dict[str, str] = field(default_factory=dict)  # of the latest request
    rate_limit_reset: int = 0  # epoch seconds, sent with a scripted rate-limit failure

    def __post_init__(self) -> None:
        self._lock = threading.RLock()
        self._server: FakeHttpServer | None = None
        self._init_counters()

    def _init_counters(self) -> None:
        self._clock = itertools.count(1)
        self._ids = itertools.count(1000)
        self._user_ids: dict[str, int] = {}
        self._label_ids: dict[str, int] = {}
        self._shas: set[str] = set()  # every head a PR ever had: the commits statuses may name
        self._failures: list[_Failure] = []
        self._used = 0

    @property
    def url(self) -> str:
        assert self._server is not None
        return self._server.url

    def reset(self) -> None:
        """An empty repository, no permission, no scripted failure, no request seen."""
        with self._lock:
            self.items.clear()
            self.statuses.clear()
            self.permissions.clear()
            self.requests.clear()
            self.last_headers = {}
            self.rate_limit_reset = 0
            self._init_counters()

    # -- reading back -----------------------------------------------------------------------------

    @property
    def comments(self) -> dict[int, list[str]]:
        """Issue or PR number -> the bodies of its comments, oldest first (numbers with comments only)."""
        with self._lock:
            return {number: list(item.comments) for number, item in self.items.items() if item.comments}

    @property
    def issues(self) -> list[FakeIssue]:
        """The issues that are not PRs, scripted or opened through the API, by number."""
        with self._lock:
            return [item for _, item in sorted(self.items.items()) if not item.is_pull]

    def item(self, number: int) -> FakeIssue:
        with self._lock:
            return self.items[number]

    # -- scripting --------------------------------------------------------------------------------

    def add_pull(
        self,
        number: int,
        sha: str,
        author: str,
        labels: Sequence[str] = (),
        ref: str | None = None,
        *,
        base: str = "main",
        title: str | None = None,
        body: str = "",
    ) -> FakeIssue:
        """An open PR from ``author``'s branch ``ref``; its ``labels`` applied by the author."""
        with self._lock:
            if number in self.items:
                raise ValueError(f"#{number} exists already (issues and PRs share the numbers)")
            now = self._tick()
            pull = FakeIssue(
                number=number,
                title=title or f"PR {number}",
                body=body,
                author=author,
                labels=[],
                created_at=now,
                updated_at=now,
                head_sha=sha,
                head_ref=ref or f"{author}/change-{number}",
                base_ref=base,
            )
            self.items[number] = pull
            self._shas.add(sha)
            for label in labels:
                self._label(pull, label, author, now)
            return pull

    def add_issue(
        self,
        title: str,
        body: str = "",
        labels: Sequence[str] = (),
        *,
        state: str = "open",
        author: str = "octocat",
    ) -> FakeIssue:
        """An issue made by hand, numbered after everything else."""
        with self._lock:
            issue = self._new_issue(title, body, labels, author)
            if state == "closed":
                self._close(issue, author)
            return issue

    def push(self, number: int, new_sha: str) -> None:
        with self._lock:
            pull = self._pull(number)
            pull.head_sha = new_sha
            pull.updated_at = self._tick()
            self._shas.add(new_sha)

    def add_label(self, number: int, label: str, actor: str) -> None:
        """Like GitHub, labelling with a label it already has changes nothing and records nothing."""
        with self._lock:
            item = self._get(number)
            if label not in item.labels:
                self._label(item, label, actor, self._tick())

    def remove_label(self, number: int, label: str, actor: str) -> None:
        with self._lock:
            item = self._get(number)
            if label not in item.labels:
                raise ValueError(f"#{number} has no label {label!r}")
            item.labels.remove(label)
            item.updated_at = self._tick()
            item.events.append(self._event("unlabeled", actor, item.updated_at, label=label))

    def set_permission(self, login: str, permission: str) -> None:
        if permission not in ROLES:
            raise ValueError(f"permission {permission!r} is not one of {ROLES}")
        with self._lock:
            self.permissions[login] = permission

    def close_pull(self, number: int) -> None:
        with self._lock:
            pull = self._pull(number)
            self._close(pull, pull.author)

    def fail_next(self, status: int, message: str, count: int = 1, rate_limited: bool = False) -> None:
        """The next ``count`` authorized requests answer ``status`` with ``message``; ``rate_limited``
        adds ``X-RateLimit-Remaining: 0`` and ``X-RateLimit-Reset`` (``rate_limit_reset``, an hour on)."""
        with self._lock:
            if rate_limited:
                self.rate_limit_reset = int(time.time()) + 3600
            self._failures.extend(_Failure(status, message, rate_limited) for _ in range(count))

    # -- the state --------------------------------------------------------------------------------

    def _tick(self) -> str:
        return _iso(_EPOCH + datetime.timedelta(seconds=next(self._clock)))

    def _get(self, number: int) -> FakeIssue:
        if number not in self.items:
            raise ApiError(404, "Not Found")
        return self.items[number]

    def _pull(self, number: int) -> FakeIssue:
        item = self._get(number)
        if not item.is_pull:
            raise ApiError(404, "Not Found")
        return item

    def _new_issue(self, title: str, body: str, labels: Sequence[str], author: str) -> FakeIssue:
        now = self._tick()
        number = max(self.items, default=0) + 1  # after every issue and PR, as on GitHub
        issue = FakeIssue(number, title, body, author, [], now, now)
        self.items[number] = issue
        for label in labels:
            if label not in issue.labels:
                self._label(issue, label, author, now)
        return issue

    def _label(self, item: FakeIssue, label: str, actor: str, now: str) -> None:
        item.labels.append(label)
        item.updated_at = now
        item.events.append(self._event("labeled", actor, now, label=label))

    def _close(self, item: FakeIssue, actor: str) -> None:
        item.state = "closed"
        item.closed_at = item.updated_at = self._tick()
        item.events.append(self._event("closed", actor, item.closed_at))

    def _event(self, kind: str, actor: str, at: str, *, label: str | None = None) -> dict[str, Any]:
        event_id = next(self._ids)
        event: dict[str, Any] = {
            "id": event_id,
            "node_id": f"LE_{event_id}",
            "url": f"{self.url}/repos/{self.repo}/issues/events/{event_id}",
            "actor": self._user(actor),
            "event": kind,
            "commit_id": None,
            "commit_url": None,
            "created_at": at,
            "performed_via_github_app": None,
        }
        if label is not None:
            event["label"] = {"name": label, "color": "ededed"}
        return event

    # -- the API ----------------------------------------------------------------------------------

    def respond(
        self, method: str, path: str, query: list[tuple[str, str]], headers: Message, raw: bytes
    ) -> tuple[int, bytes, dict[str, str]]:
        """One request: (status, body, headers). Every request lands in ``requests``."""
        with self._lock:
            self.last_headers = {key: value for key, value in headers.items()}
            extra: dict[str, str] = {}
            try:
                self._authorize(headers.get("Authorization"))
                if self._failures:
                    self._fail(self._failures.pop(0))
                try:
                    body = json.loads(raw) if raw.strip() else {}
                except ValueError as error:
                    raise ApiError(400, "Problems parsing JSON") from error
                status, answer, extra = self._route(method, path, dict(query), body)
            except ApiError as error:
                status, extra = error.status, error.headers
                answer = {"message": error.message, "documentation_url": DOCS}
                if error.errors:
                    answer["errors"] = error.errors
            payload = json.dumps(answer).encode()
            out = {**self._rate_headers(), **extra}
            if method == "GET" and status == 200:
                out["ETag"] = f'W/"{hashlib.sha256(payload).hexdigest()}"'
                if _matches(headers.get("If-None-Match"), out["ETag"]):
                    status, payload = 304, b""
            if status != 304:  # conditional requests that hit cost no rate limit
                self._used += 1
            self.requests.append((method, path, status))
            return status, payload, out

    def _authorize(self, authorization: str | None) -> None:
        if authorization != f"Bearer {self.token}":
            raise ApiError(401, "Bad credentials")

    def _fail(self, failure: _Failure) -> None:
        headers = {}
        if failure.rate_limited:
            headers = {"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": str(self.rate_limit_reset)}
        raise ApiError(failure.status, failure.message, headers=headers)

    def _rate_headers(self) -> dict[str, str]:
        return {
            "X-RateLimit-Limit": str(RATE_LIMIT),
            "X-RateLimit-Remaining": str(max(0, RATE_LIMIT - self._used)),
            "X-RateLimit-Used": str(self._used),
            "X-RateLimit-Reset": str(int(time.time()) + 3600),
            "X-RateLimit-Resource": "core",
        }

    def _route(
        self, method: str, path: str, query: dict[str, str], body: Any
    ) -> tuple[int, Any, dict[str, str]]:
        match = _REPO_PATH.fullmatch(path)
        if match is None or f"{match['owner']}/{match['name']}".lower() != self.repo.lower():
            raise ApiError(404, "Not Found")
        parts = (match["rest"] or "/").strip("/").split("/")
        route = (method, *parts)
        if route == ("GET", "pulls"):
            return self._page(path, query, self._list_pulls(query))
        if len(parts) == 2 and route[:2] == ("GET", "pulls") and parts[1].isdigit():
            return 200, self._pull_json(self._pull(int(parts[1]))), {}
        if route == ("GET", "issues"):
            return self._page(path, query, self._list_issues(query))
        if route == ("POST", "issues"):
            return 201, self._issue_json(self._create_issue(body)), {}
        if len(parts) >= 2 and parts[0] == "issues" and parts[1].isdigit():
            return self._issue_route(method, path, int(parts[1]), parts[2:], query, body)
        if method == "GET" and len(parts) == 3 and parts[0] == "collaborators" and parts[2] == "permission":
            return 200, self._permission_json(parts[1]), {}
        if method == "POST" and len(parts) == 2 and parts[0] == "statuses":
            return 201, self._create_status(parts[1], body), {}
        raise ApiError(404, "Not Found")

    def _issue_route(
        self, method: str, path: str, number: int, rest: list[str], query: dict[str, str], body: Any
    ) -> tuple[int, Any, dict[str, str]]:
        item = self._get(number)
        if method == "GET" and not rest:
            return 200, self._issue_json(item), {}
        if method == "GET" and rest == ["events"]:
            return self._page(path, query, item.events)
        if method == "GET" and rest == ["comments"]:
            return self._page(
                path, query, [self._comment_json(item, i, c) for i, c in enumerate(item.comments)]
            )
        if method == "POST" and rest == ["comments"]:
            text = body.get("body") if isinstance(body, dict) else None
            if not isinstance(text, str) or not text:
                raise ApiError(422, "Validation Failed", errors=[_missing("IssueComment", "body")])
            item.comments.append(text)
            item.updated_at = self._tick()  # a comment bumps the issue's (and the PR's) updated_at
            return 201, self._comment_json(item, len(item.comments) - 1, text), {}
        raise ApiError(404, "Not Found")

    def _list_pulls(self, query: dict[str, str]) -> list[dict[str, Any]]:
        pulls = [item for item in self.items.values() if item.is_pull and _state_matches(item, query)]
        return [self._pull_json(pull) for pull in _sorted(pulls, query)]

    def _list_issues(self, query: dict[str, str]) -> list[dict[str, Any]]:
        wanted = {name.strip().lower() for name in query.get("labels", "").split(",") if name.strip()}
        found = [
            item
            for item in self.items.values()
            if _state_matches(item, query) and wanted <= {label.lower() for label in item.labels}
        ]
        return [self._issue_json(item) for item in _sorted(found, query)]

    def _create_issue(self, body: Any) -> FakeIssue:
        if not isinstance(body, dict) or not isinstance(body.get("title"), str) or not body["title"]:
            raise ApiError(422, "Validation Failed", errors=[_missing("Issue", "title")])
        labels = body.get("labels") or []
        if not isinstance(labels, list) or not all(isinstance(label, str) for label in labels):
            raise ApiError(422, "Validation Failed", errors=[_invalid("Issue", "labels")])
        return self._new_issue(body["title"], body.get("body") or "", labels, self.bot_login)

    def _permission_json(self, login: str) -> dict[str, Any]:
        role = self.permissions.get(login)
        if role is None:
            raise ApiError(404, "Not Found")
        return {"permission": LEGACY_PERMISSION.get(role, role), "role_name": role, "user": self._user(login)}

    def _create_status(self, sha: str, body: Any) -> dict[str, Any]:
        if not isinstance(body, dict):
            raise ApiError(422, "Validation Failed", errors=[_missing("Status", "state")])
        if sha not in self._shas:
            raise ApiError(422, f"No commit found for SHA: {sha}")
        state, description = body.get("state"), body.get("description")
        if state not in STATUS_STATES:
            raise ApiError(
                422, "Validation Failed", errors=[_custom("state", "state is not included in the list")]
            )
        if description is not None and len(description) > 140:
            message = "description is too long (maximum is 140 characters)"
            raise ApiError(422, "Validation Failed", errors=[_custom("description", message)])
        status = {
            "state": state,
            "context": body.get("context") or "default",
            "description": description,
            "target_url": body.get("target_url"),
        }
        self.statuses.setdefault(sha, []).append(status)
        status_id, now = next(self._ids), self._tick()
        return {
            "url": f"{self.url}/repos/{self.repo}/statuses/{sha}",
            "id": status_id,
            "node_id": f"SC_{status_id}",
            **status,
            "created_at": now,
            "updated_at": now,
            "creator": self._user(self.bot_login),
        }

    def _page(self, path: str, query: dict[str, str], items: list[Any]) -> tuple[int, Any, dict[str, str]]:
        """``per_page`` (default 30, at most 100) items of page ``page``, with GitHub's Link header."""
        per_page = min(100, max(1, _int(query.get("per_page"), 30)))
        page = max(1, _int(query.get("page"), 1))
        last = max(1, -(-len(items) // per_page))

        def link(to: int) -> str:
            return f"{self.url}{path}?{urlencode({**query, 'page': str(to)})}"

        rels = []
        if page < last:
            rels += [f'<{link(page + 1)}>; rel="next"', f'<{link(last)}>; rel="last"']
        if page > 1:
            rels += [f'<{link(page - 1)}>; rel="prev"', f'<{link(1)}>; rel="first"']
        headers = {"Link": ", ".join(rels)} if rels else {}
        return 200, items[(page - 1) * per_page : page * per_page], headers

    # -- JSON shapes ------------------------------------------------------------------------------

    def _user(self, login: str) -> dict[str, Any]:
        user_id = self._user_ids.setdefault(login, 5000 + len(self._user_ids))
        return {
            "login": login,
            "id": user_id,
            "node_id": f"U_{user_id}",
            "url": f"{self.url}/users/{login}",
            "html_url": f"{WEB}/{login}",
            "type": "Bot" if login.endswith("[bot]") else "User",
            "site_admin": False,
        }

    def _labels_json(self, item: FakeIssue) -> list[dict[str, Any]]:
        labels = []
        for name in item.labels:
            label_id = self._label_ids.setdefault(name, 9000 + len(self._label_ids))
            labels.append(
                {
                    "id": label_id,
                    "node_id": f"LA_{label_id}",
                    "url": f"{self.url}/repos/{self.repo}/labels/{name}",
                    "name": name,
                    "color": "ededed",
                    "default": False,
                    "description": None,
                }
            )
        return labels

    def _html_url(self, item: FakeIssue) -> str:
        return f"{WEB}/{self.repo}/{'pull' if item.is_pull else 'issues'}/{item.number}"

    def _common_json(self, item: FakeIssue, api: str) -> dict[str, Any]:
        return {
            "url": f"{self.url}/repos/{self.repo}/{api}/{item.number}",
            "id": 100000 + item.number,
            "node_id": f"{'PR' if api == 'pulls' else 'I'}_{item.number}",
            "html_url": self._html_url(item),
            "number": item.number,
            "state": item.state,
            "locked": False,
            "title": item.title,
            "user": self._user(item.author),
            "body": item.body or None,
            "labels": self._labels_json(item),
            "created_at": item.created_at,
            "updated_at": item.updated_at,
            "closed_at": item.closed_at,
            "author_association": "CONTRIBUTOR",
        }

    def _pull_json(self, item: FakeIssue) -> dict[str, Any]:
        owner, name = self.repo.split("/")
        repo = {"name": name, "full_name": self.repo, "owner": self._user(owner)}
        head = {
            "label": f"{item.author}:{item.head_ref}",
            "ref": item.head_ref,
            "sha": item.head_sha,
            "user": self._user(item.author),
            "repo": repo,
        }
        base = {
            "label": f"{owner}:{item.base_ref}",
            "ref": item.base_ref,
            "user": self._user(owner),
            "repo": repo,
        }
        return {
            **self._common_json(item, "pulls"),
            "draft": False,
            "merged_at": None,
            "head": head,
            "base": base,
        }

    def _issue_json(self, item: FakeIssue) -> dict[str, Any]:
        answer = {**self._common_json(item, "issues"), "comments": len(item.comments)}
        if item.is_pull:
            pulls = f"{self.url}/repos/{self.repo}/pulls/{item.number}"
            html = self._html_url(item)
            answer["pull_request"] = {
                "url": pulls,
                "html_url": html,
                "diff_url": f"{html}.diff",
                "patch_url": f"{html}.patch",
                "merged_at": None,
            }
        return answer

    def _comment_json(self, item: FakeIssue, index: int, body: str) -> dict[str, Any]:
        comment_id = item.number * 1000 + index + 1  # stable across reads of the same comment
        return {
            "id": comment_id,
            "node_id": f"IC_{comment_id}",
            "url": f"{self.url}/repos/{self.repo}/issues/comments/{comment_id}",
            "html_url": f"{self._html_url(item)}#issuecomment-{comment_id}",
            "issue_url": f"{self.url}/repos/{self.repo}/issues/{item.number}",
            "body": body,
            "user": self._user(self.bot_login),
            "author_association": "MEMBER",
        }

    # -- the server -------------------------------------------------------------------------------

    def start(self) -> FakeGitHubApi:
        def respond(request: Request) -> Response:
            query = parse_qsl(request.query, keep_blank_values=True)
            status, payload, headers = self.respond(
                request.method, request.path, query, request.headers, request.body
            )
            return Response(status, payload, headers)

        self._server = FakeHttpServer(respond, "fake-github-api")
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop()


def _iso(moment: datetime.datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def _int(raw: str | None, default: int) -> int:
    try:
        return int(raw) if raw else default
    except ValueError:
        return default


def _matches(if_none_match: str | None, etag: str) -> bool:
    """RFC 9110's weak comparison: W/ aside, the opaque tags are equal; "*" matches any."""
    if not if_none_match:
        return False
    strip = etag.removeprefix("W/")
    return any(
        tag.strip() == "*" or tag.strip().removeprefix("W/") == strip for tag in if_none_match.split(",")
    )


def _state_matches(item: FakeIssue, query: Mapping[str, str]) -> bool:
    state = query.get("state", "open")
    return state == "all" or item.state == state


def _sorted(items: list[FakeIssue], query: Mapping[str, str]) -> list[FakeIssue]:
    # GitHub: sort by created unless told; descending for created, ascending otherwise unless told.
    key = query.get("sort", "created")
    direction = query.get("direction", "desc" if key == "created" else "asc")
    field_of = {"updated": lambda item: item.updated_at}.get(key, lambda item: item.created_at)
    return sorted(items, key=lambda item: (field_of(item), item.number), reverse=direction == "desc")


def _missing(resource: str, name: str) -> dict[str, str]:
    return {"resource": resource, "code": "missing_field", "field": name}


def _invalid(resource: str, name: str) -> dict[str, str]:
    return {"resource": resource, "code": "invalid", "field": name}


def _custom(name: str, message: str) -> dict[str, str]:
    return {"resource": "Status", "code": "custom", "field": name, "message": message}


@pytest.fixture(scope="session", name="github_api_server")
def github_api_server_fixture() -> Iterator[FakeGitHubApi]:
    """The fake GitHub API for the session."""
    api = FakeGitHubApi().start()
    try:
        yield api
    finally:
        api.stop()


@pytest.fixture(name="github_api")
def github_api_fixture(github_api_server: FakeGitHubApi) -> Iterator[FakeGitHubApi]:
    """The session's fake GitHub API with an empty repository and no scripted failure."""
    github_api_server.reset()
    yield github_api_server
    with contextlib.suppress(Exception):
        github_api_server.reset()
