"""The distributions an environment's Python sees, with their versions: what the night's suites
actually ran with (pytest's version included), recorded beside the environment."""

from __future__ import annotations

import json
from pathlib import Path

from nightly_assets.builds.framework_stack import LIST_DISTRIBUTIONS
from nightly_assets.process import run_command


def installed_distributions(python: Path | str) -> dict[str, str]:
    """{normalised name: version} of every distribution `python` imports (the first on its path)."""
    return distribution_versions(run_command([python, "-c", LIST_DISTRIBUTIONS], timeout_s=120).output)


def distribution_versions(listing: str) -> dict[str, str]:
    """Name and version of each distribution in LIST_DISTRIBUTIONS' output (its last line)."""
    found = json.loads(listing.strip().splitlines()[-1])["distributions"]
    return {name: version for name, (version, _) in sorted(found.items())}


def distribution_metadata(distributions: dict[str, str]) -> dict[str, str | int]:
    """The asset metadata of an environment's distributions: how many, and which pytest."""
    return {"distributions": len(distributions), "pytest": distributions.get("pytest", "none")}
