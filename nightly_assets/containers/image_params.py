"""A docker_image stage's `params`: which image (framework or runtime), what goes in, where it is
pushed and under which tags. Here, below the stage kind, for the image builder to read."""

from typing import Literal

from pydantic import Field

from nightly_assets.builds.framework_stack import FrameworkStackParams
from nightly_assets.builds.suite_dependencies import SuiteDependencyParams
from nightly_assets.catalog.kinds import RepoParams


class DockerImageParams(RepoParams, SuiteDependencyParams, FrameworkStackParams):
    role: Literal["framework", "runtime"] = "runtime"  # framework: base, cached; runtime: wheels + tests
    install_wheels: bool = False  # the nearest upstream wheels stage's wheels go into the image
    tests: list[str] = Field(default_factory=lambda: ["tests"])  # checkout paths copied in for pytest
    suites: list[str] = Field(default_factory=list)  # packaged suites (nightly_assets/suites) copied in
    fallback: Literal["venv"] | None = None  # venv: a virtualenv when no Docker engine answers
    push_to: list[str] = Field(default_factory=list)  # registry roles, the first is primary
    tag: str | None = None  # one tag template ({night}, {run_id}, {arch}, target params...)
    tags: list[str] = Field(default_factory=list)  # several tag templates
    python: str = "python3"  # the image's Python, for the suites run in it
    dockerfile: str | None = None  # build the repository's own Dockerfile instead of a recipe
    base_image: str | None = None  # framework role: FROM (default the runner pool's base image)
    repository: str | None = None  # the image's name in every registry (default the pipeline's)

    def tag_templates(self) -> list[str]:
        return self.tags or ([self.tag] if self.tag else [])
