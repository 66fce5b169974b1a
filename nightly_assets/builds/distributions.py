"""The distributions an environment's Python sees, with their versions: what the night's suites
actually ran with (pytest's version included), recorded beside the environment."""

from __future__ import annotations

import json
from pathlib import Path

from nightly_assets.process import run_command

# The first distribution of a name on sys.path is the one imported; later ones are shadowed.
_LIST = """
import importlib.metadata, json, re
found = {}
for dist in importlib.metadata.distributions():
    name = dist.metadata["Name"]
    if name:
        found.setdefault(re.sub(r"[-_.]+", "-", name).lower(), dist.version)
print(json.dumps(found, sort_keys=True))
"""


def installed_distributions(python: Path | str) -> dict[str, str]:
    """{normalised name: version} of every distribution `python` can import, its own first."""
    output = run_command([python, "-c", _LIST], timeout_s=120).output
    listing = [line for line in output.splitlines() if line.startswith("{")]  # past any warning
    if not listing:
        raise ValueError(f"{python}: listing its distributions printed no JSON: {output[-500:]!r}")
    return dict(json.loads(listing[-1]))


def distribution_metadata(distributions: dict[str, str]) -> dict[str, str | int]:
    """The asset metadata of an environment's distributions: how many, and which pytest."""
    return {"distributions": len(distributions), "pytest": distributions.get("pytest", "none")}
