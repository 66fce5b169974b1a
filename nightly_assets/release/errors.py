"""What can go wrong publishing to a package index: each error's message names the index, its URL
and what to do."""

from __future__ import annotations


class PublishError(RuntimeError):
    """Publishing to an index failed; the message names the index, its URL and what to do."""


class IndexNotConfigured(PublishError):
    """No index of that name in this deployment."""


class IndexUnreachable(PublishError):
    """The index does not answer (connection refused, DNS, timeout)."""


class CredentialsRefused(PublishError):
    """The index answered 401 or 403 to the upload."""


class DistributionInvalid(PublishError):
    """`twine check --strict` refused a file."""
