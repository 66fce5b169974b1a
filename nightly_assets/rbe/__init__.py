"""Bazel builds and test runs with remote build execution / a remote cache (seed 000), with a local
fallback, and Bazel bootstrapped from source (seed 004)."""

from nightly_assets.rbe.bazel import BazelConfigError, TargetSummary
from nightly_assets.rbe.remote import RemoteSettings
from nightly_assets.rbe.resources import BazelRbeResource, TestTimeouts
from nightly_assets.rbe.runs import (
    BazelBuildError,
    BazelBuildRun,
    BazelError,
    BazelTestError,
    BazelTestRun,
    RemoteUnavailableError,
)

__all__ = [
    "BazelBuildError",
    "BazelBuildRun",
    "BazelConfigError",
    "BazelError",
    "BazelRbeResource",
    "BazelTestError",
    "BazelTestRun",
    "RemoteSettings",
    "RemoteUnavailableError",
    "TargetSummary",
    "TestTimeouts",
]
