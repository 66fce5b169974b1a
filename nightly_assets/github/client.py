"""A small GitHub REST client for one repository, on ``requests``.

Only what the nightly needs: the open pull requests (a conditional request, so an unchanged list
costs one call and no rate limit), who applied a label, a user's role, comments, commit statuses
and one issue per recurring failure. No retries: the callers poll again on their next tick.
The token goes in the session's headers only; no message this module makes contains it.
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlsplit

if TYPE_CHECKING:  # requests on the first call: the sensors that hold a client load without it
    import requests

API_VERSION = "2022-11-28"
PER_PAGE = 100  # GitHub's maximum: the fewest calls
STATUS_STATES = frozenset({"pending", "success", "failure", "error"})
STATUS_DESCRIPTION_MAX = 140  # GitHub answers 422 to a longer description
ROLES = frozenset({"admin", "maintain", "write", "triage", "read"})
# GitHub's rules: an owner is letters, digits and inner hyphens; a name letters, digits, "._-".
_REPO = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})/[A-Za-z0-9._-]{1,100}")
_ERRNO = re.compile(r"\[Errno -?\d+\] ([^'\")]+)")


class GitHubError(RuntimeError):
    """A GitHub API call failed; the message names the call and GitHub's answer, never the token."""

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status  # the HTTP status; None when GitHub was not reached


@dataclass(frozen=True)
class PullRequest:
    number: int
    head_sha: str
    head_ref: str
    base_ref: str
    labels: tuple[str, ...]
    author: str
    html_url: str
    updated_at: str


@dataclass(frozen=True)
class Issue:
    number: int
    title: str
    html_url: str
    body: str


class GitHubClient:
    """Calls the GitHub REST API (``api_url``: api.github.com or ``https://HOST/api/v3``) for ``repo``."""

    def __init__(self, api_url: str, repo: str, token: str | None, *, timeout_s: float = 30.0) -> None:
        if not _REPO.fullmatch(repo) or repo.endswith(("/.", "/..")):
            raise ValueError(f"GitHub repository {repo!r} is not of the form 'owner/name'")
        split = urlsplit(api_url)
        if split.scheme not in ("http", "https") or not split.netloc:
            raise ValueError(f"GitHub API URL {api_url!r} is not an http(s) URL")
        self.api_url = api_url.rstrip("/")
        self.repo = repo
        self.timeout_s = timeout_s
        self.calls = 0  # every request sent, 304s included
        self._origin = (split.scheme, split.netloc)
        self._token = token
        import requests

        self._session = requests.Session()
        self._session.headers.update(
            {
                "Accept": "application/vnd.github+json",
                "X-GitHub-Api-Version": API_VERSION,
                "User-Agent": "nightly-assets",
            }
        )
        if token:
            self._session.headers["Authorization"] = f"Bearer {token}"

    def __repr__(self) -> str:
        token = "'***'" if self._token else "None"
        return f"GitHubClient(api_url={self.api_url!r}, repo={self.repo!r}, token={token})"

    def close(self) -> None:
        self._session.close()

    def __enter__(self) -> GitHubClient:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    # -- pull requests ----------------------------------------------------------------------------

    def open_pulls(self, etag: str | None = None) -> tuple[list[PullRequest] | None, str | None]:
        """The open pull requests, most recently updated first, and the list's ETag.

        With the ETag of the previous answer, an unchanged list is one 304 (which GitHub does not
        count against the rate limit): ``(None, etag)``. The ETag covers the first page only; a
        push, a label or a new PR moves that PR to the top, so the first page changes with it.
        """
        params = {"state": "open", "sort": "updated", "direction": "desc", "per_page": PER_PAGE}
        headers = {"If-None-Match": etag} if etag else None
        path = f"/repos/{self.repo}/pulls"
        first = self._request("GET", path, params=params, headers=headers, ok=(200, 304))
        if first.status_code == 304:
            return None, etag
        pulls: dict[int, PullRequest] = {}
        for item in self._follow("GET", path, first):
            pull = _pull(item)
            # A PR updated while we page moves to page 1 and may come again on a later page.
            pulls.setdefault(pull.number, pull)
        return list(pulls.values()), first.headers.get("ETag")

    def label_actor(self, number: int, label: str) -> str | None:
        """The login that most recently applied ``label`` to issue or PR ``number``; None if nobody did."""
        actor: str | None = None
        for event in self._get_all(f"/repos/{self.repo}/issues/{int(number)}/events", {"per_page": PER_PAGE}):
            # Events come oldest first: the last match wins.
            if event.get("event") == "labeled" and (event.get("label") or {}).get("name") == label:
                actor = (event.get("actor") or {}).get("login")
        return actor

    def permission(self, login: str) -> str:
        """``login``'s role in the repository: admin, maintain, write, triage, read or none.

        GitHub's ``permission`` field folds maintain into write and triage into read; its
        ``role_name`` keeps them, so that is preferred (a custom role falls back to its base).
        """
        if not login:
            raise ValueError("a GitHub login is required")
        path = f"/repos/{self.repo}/collaborators/{quote(login, safe='')}/permission"
        response = self._request("GET", path, ok=(200, 404))
        if response.status_code == 404:  # not a collaborator, or no such user
            return "none"
        answer = _json_object("GET", path, response)
        role = answer.get("role_name")
        if role in ROLES:
            return str(role)
        return str(answer.get("permission") or "none")

    # -- writing ----------------------------------------------------------------------------------

    def comment(self, number: int, body: str) -> str:
        """Comments ``body`` on issue or PR ``number``; returns the comment's html_url."""
        path = f"/repos/{self.repo}/issues/{int(number)}/comments"
        response = self._request("POST", path, body={"body": body}, ok=(201,))
        return str(_json_object("POST", path, response)["html_url"])

    def set_status(
        self, sha: str, state: str, *, context: str, description: str, target_url: str | None = None
    ) -> None:
        """Sets the commit status ``context`` of ``sha`` (the check a PR shows)."""
        if state not in STATUS_STATES:
            raise ValueError(f"commit status state {state!r} is not one of {sorted(STATUS_STATES)}")
        if len(description) > STATUS_DESCRIPTION_MAX:
            description = description[: STATUS_DESCRIPTION_MAX - 1] + "…"
        body: dict[str, Any] = {"state": state, "context": context, "description": description}
        if target_url:
            body["target_url"] = target_url
        self._request("POST", f"/repos/{self.repo}/statuses/{quote(sha, safe='')}", body=body, ok=(201,))

    def open_or_update_issue(
        self, *, title: str, body: str, marker: str, labels: Sequence[str]
    ) -> tuple[Issue, bool]:
        """Comments ``body`` on the open issue carrying ``labels`` whose body holds ``marker``, or
        opens that issue; returns it and whether it is new.

        The marker, not the title, identifies the issue, so a reworded title never opens a second.
        """
        if not marker or "-->" in marker:
            raise ValueError(f"issue marker {marker!r} must be non-empty and must not contain '-->'")
        if any("," in label for label in labels):
            raise ValueError(f"issue labels {list(labels)!r} must not contain ',' (the filter's separator)")
        params: dict[str, Any] = {"state": "open", "per_page": PER_PAGE}
        if labels:
            params["labels"] = ",".join(labels)
        matches = [
            item
            for item in self._get_all(f"/repos/{self.repo}/issues", params)
            if "pull_request" not in item  # the issues list holds PRs too
            and set(labels) <= set(_label_names(item))
            and marker in (item.get("body") or "")
        ]
        if matches:
            # The oldest: should a duplicate have been made by hand, the comments stay on one.
            issue = _issue(min(matches, key=lambda item: int(item["number"])))
            self.comment(issue.number, body)
            return issue, False
        if marker not in body:
            body = f"{body}\n\n<!-- {marker} -->"
        path = f"/repos/{self.repo}/issues"
        payload = {"title": title, "body": body, "labels": list(labels)}
        response = self._request("POST", path, body=payload, ok=(201,))
        return _issue(_json_object("POST", path, response)), True

    # -- HTTP -------------------------------------------------------------------------------------

    def _get_all(self, path: str, params: Mapping[str, Any]) -> list[dict[str, Any]]:
        return self._follow("GET", path, self._request("GET", path, params=params))

    def _follow(self, method: str, path: str, response: requests.Response) -> list[dict[str, Any]]:
        """The items of ``response`` and of every page its Link rel="next" chain leads to."""
        items = _json_list(method, path, response)
        seen: set[str] = set()
        while next_url := response.links.get("next", {}).get("url"):
            split = urlsplit(next_url)
            # The token goes with every request: never to another host than the configured one.
            if (split.scheme, split.netloc) != self._origin:
                raise GitHubError(f"{method} {path}: the next page {next_url} is not on {self.api_url}")
            if next_url in seen:
                raise GitHubError(f"{method} {path}: the next page {next_url} links back to itself")
            seen.add(next_url)
            response = self._request(method, next_url)
            items.extend(_json_list(method, split.path, response))
        return items

    def _request(
        self,
        method: str,
        path_or_url: str,
        *,
        params: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
        body: Any = None,
        ok: tuple[int, ...] = (200,),
    ) -> requests.Response:
        import requests

        url = path_or_url if "://" in path_or_url else self.api_url + path_or_url
        path = urlsplit(url).path
        self.calls += 1
        try:
            response = self._session.request(
                method, url, params=params, headers=headers, json=body, timeout=self.timeout_s
            )
        except requests.Timeout as error:
            message = (
                f"{method} {path}: no answer from the GitHub API at {self.api_url} in {self.timeout_s:g} s"
            )
            raise GitHubError(self._redact(message)) from error
        except requests.RequestException as error:
            message = f"{method} {path}: cannot reach the GitHub API at {self.api_url}: {_reason(error)}"
            raise GitHubError(self._redact(message)) from error
        if response.status_code in ok:
            return response
        raise GitHubError(self._redact(_failure(method, path, response)), status=response.status_code)

    def _redact(self, text: str) -> str:
        # Belt and braces: nothing should echo the token, but a message never carries it.
        return text.replace(self._token, "***") if self._token else text


def _failure(method: str, path: str, response: requests.Response) -> str:
    status, headers = response.status_code, response.headers
    where = f"{method} {path} -> {status}: {_github_message(response)}"
    if status in (403, 429) and headers.get("X-RateLimit-Remaining") == "0":
        return f"GitHub API rate limit exhausted ({where}); it resets at {_reset_time(headers)}"
    if status in (403, 429) and "Retry-After" in headers:  # a secondary (abuse) rate limit
        return f"GitHub API secondary rate limit ({where}); retry after {headers['Retry-After']} s"
    return f"GitHub API {where}"


def _github_message(response: requests.Response) -> str:
    """GitHub's "message", with a 422's validation errors; the HTTP reason if there is none."""
    try:
        answer = response.json()
    except ValueError:
        answer = None
    if not isinstance(answer, dict) or not answer.get("message"):
        return response.reason or "no message"
    details = []
    for error in answer.get("errors") or []:
        if isinstance(error, dict):
            details.append(str(error.get("message") or f"{error.get('field')} {error.get('code')}"))
        else:
            details.append(str(error))
    return f"{answer['message']} ({'; '.join(details)})" if details else str(answer["message"])


def _reset_time(headers: Mapping[str, str]) -> str:
    try:
        reset = datetime.datetime.fromtimestamp(int(headers["X-RateLimit-Reset"]), datetime.UTC)
    except (KeyError, ValueError):
        return "an unknown time (no X-RateLimit-Reset)"
    wait_s = max(0, int((reset - datetime.datetime.now(datetime.UTC)).total_seconds()))
    return f"{reset:%Y-%m-%d %H:%M:%S} UTC (in {wait_s} s)"


def _reason(error: requests.RequestException) -> str:
    """The OS's words for a failed connection ("Connection refused"), not urllib3's nesting."""
    found = _ERRNO.search(str(error))
    return found.group(1).strip() if found else f"{type(error).__name__}: {error}"


def _json_object(method: str, path: str, response: requests.Response) -> dict[str, Any]:
    answer = _json(method, path, response)
    if not isinstance(answer, dict):
        raise GitHubError(f"{method} {path}: expected a JSON object, got {type(answer).__name__}")
    return answer


def _json_list(method: str, path: str, response: requests.Response) -> list[dict[str, Any]]:
    answer = _json(method, path, response)
    if not isinstance(answer, list):
        raise GitHubError(f"{method} {path}: expected a JSON list, got {type(answer).__name__}")
    return answer


def _json(method: str, path: str, response: requests.Response) -> Any:
    try:
        return response.json()
    except ValueError as error:
        raise GitHubError(f"{method} {path} -> {response.status_code}: the answer is not JSON") from error


def _label_names(item: Mapping[str, Any]) -> tuple[str, ...]:
    # Labels are objects in REST answers; plain names are accepted too. GitHub's order is kept.
    return tuple(
        label["name"] if isinstance(label, dict) else str(label) for label in item.get("labels") or []
    )


def _pull(item: Mapping[str, Any]) -> PullRequest:
    return PullRequest(
        number=int(item["number"]),
        head_sha=item["head"]["sha"],
        head_ref=item["head"]["ref"],
        base_ref=item["base"]["ref"],
        labels=_label_names(item),
        author=(item.get("user") or {}).get("login") or "ghost",  # a deleted account has no user
        html_url=item["html_url"],
        updated_at=item["updated_at"],
    )


def _issue(item: Mapping[str, Any]) -> Issue:
    return Issue(
        number=int(item["number"]),
        title=item.get("title") or "",
        html_url=item["html_url"],
        body=item.get("body") or "",
    )
