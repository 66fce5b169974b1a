"""The GitHub resource: the repository the nightly reports to (PR statuses, comments, issues)."""

from __future__ import annotations

import dagster as dg
from pydantic import Field

from nightly_assets.github.client import GitHubClient


class GitHubResource(dg.ConfigurableResource):
    """One GitHub repository, through the REST API."""

    api_url: str = Field(
        default="https://api.github.com",
        description="the REST API root; GitHub Enterprise Server: https://HOST/api/v3",
    )
    repo: str = Field(default="", description="the default repository, owner/name (pipelines name theirs)")
    token: str | None = Field(
        default=None,
        description=(
            "a token that may read pull requests and write statuses, comments and issues; "
            "set it from an EnvVar (dg.EnvVar('GITHUB_TOKEN')), never inline in config"
        ),
    )
    timeout_s: float = Field(default=30.0, gt=0, description="per HTTP request")

    def client(self, repo: str | None = None) -> GitHubClient:
        return GitHubClient(self.api_url, repo or self.repo, self.token, timeout_s=self.timeout_s)
