"""A culprit_search stage's `params`: how far each search may go. Here, below the stage kind, for
the search to read."""

from pydantic import Field

from nightly_assets.catalog.kinds import StageParams


class CulpritSearchParams(StageParams):
    max_probes: int = Field(default=12, ge=1)  # per subject: about log2 of the commits between
    max_tests: int = Field(default=5, ge=1)  # failing tests re-run per suite
    timeout_minutes: int = Field(default=30, ge=1)  # per probe's test or benchmark run
