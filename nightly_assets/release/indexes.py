"""The package indexes a deployment publishes to: `local` (a flat find-links folder), and the real
ones (PyPI, TestPyPI, pypiserver, a private one), each set from its NIGHTLY_* variables
(``INDEX_VARIABLES``) and reached with twine (``upload.py``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated
from urllib.parse import urlsplit

import dagster as dg
from pydantic import AfterValidator, ConfigDict, Field

from nightly_assets.settings import FromEnv

LOCAL = "local"
PYPI_TOKEN_USER = "__token__"  # noqa: S105  # the username of PyPI's (and TestPyPI's) API tokens


@dataclass(frozen=True)
class IndexVariables:
    """The NIGHTLY_* variables one named index is set from (`resources_for`)."""

    url: str
    simple_url: str
    username: str
    password: str

    def describe(self) -> str:
        return (
            f"{self.url} (the upload endpoint), {self.username} and {self.password}; "
            f"{self.simple_url} where pip reads it elsewhere (default: <url>/simple/)"
        )


# The deployment's indexes and their variables. `test` falls back to the local folder in the
# embedded default when its URL is unset; `production` never does.
INDEX_VARIABLES = {
    "test": IndexVariables(
        url="NIGHTLY_TEST_INDEX_URL",
        simple_url="NIGHTLY_TEST_INDEX_SIMPLE_URL",
        username="NIGHTLY_TEST_INDEX_USER",
        password="NIGHTLY_TEST_INDEX_PASSWORD",  # noqa: S106  # a name
    ),
    "production": IndexVariables(
        url="NIGHTLY_PROD_INDEX_URL",
        simple_url="NIGHTLY_PROD_INDEX_SIMPLE_URL",
        username="NIGHTLY_PROD_INDEX_USER",
        password="NIGHTLY_PROD_INDEX_PASSWORD",  # noqa: S106  # a name
    ),
}


def _http_url(url: str) -> str:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{url!r}: expected an http(s) URL")
    if parts.username or parts.password:
        # It would reach twine's command line, logs and metadata: credentials go in their fields.
        raise ValueError("expected a URL without credentials; set the username and password apart")
    return url


# Checked when the run reads the variable (FromEnv), not on its name.
HttpUrl = Annotated[str, AfterValidator(_http_url), FromEnv]


class PackageIndex(dg.Config):
    """One index twine uploads to and pip installs back from. Set `password` from an EnvVar
    (`resources_for` does), never inline: the run config then shows the variable's name only."""

    # A refused value is not repeated in the error: a URL may carry credentials by mistake.
    model_config = ConfigDict(hide_input_in_errors=True)

    url: HttpUrl = Field(
        description="twine's --repository-url: https://upload.pypi.org/legacy/, "
        "https://test.pypi.org/legacy/, http://host:port/ for pypiserver"
    )
    simple_url: HttpUrl | None = Field(
        default=None,
        description="the PEP 503 simple index pip installs from (TestPyPI: https://test.pypi.org/simple/); "
        "default <url>/simple/",
    )
    username: str = Field(default=PYPI_TOKEN_USER, description="__token__ for a PyPI API token")
    password: str | None = Field(
        default=None, description="the password or API token (an EnvVar)", repr=False
    )

    @property
    def index_url(self) -> str:
        return self.simple_url or self.url.rstrip("/") + "/simple/"
