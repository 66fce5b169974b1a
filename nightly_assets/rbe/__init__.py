"""Bazel test runs with remote build execution / a remote cache (seed 000), with a local fallback."""

from nightly_assets.rbe.bazel import BazelConfigError, TargetSummary
from nightly_assets.rbe.resources import (
    BazelRbeResource,
    BazelTestError,
    BazelTestRun,
    RemoteSettings,
    RemoteUnavailableError,
    TestTimeouts,
)

__all__ = [
    "BazelConfigError",
    "BazelRbeResource",
    "BazelTestError",
    "BazelTestRun",
    "RemoteSettings",
    "RemoteUnavailableError",
    "TargetSummary",
    "TestTimeouts",
]
