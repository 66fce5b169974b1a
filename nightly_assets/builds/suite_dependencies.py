"""What a suite needs besides the night's wheels, as the catalog names it (requirements files of
the checkout, extras of the project, PEP 735 dependency groups of its pyproject.toml, more
requirements, the pytest it runs with) and as the builder installs it."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import canonicalize_name
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from nightly_assets.builds.dependency_groups import DependencyGroupError, pyproject_groups


@dataclass(frozen=True)
class SuiteDependencies:
    """Resolved against the night's checkout; every package comes from the package sources."""

    __test__ = False  # not a pytest class

    requirements: list[Path] = field(default_factory=list)
    extras: list[str] = field(default_factory=list)
    packages: list[str] = field(default_factory=list)
    groups: dict[str, list[str]] = field(default_factory=dict)  # group -> its resolved requirements
    pytest: str = ""  # a version specifier ("<9"); empty: any

    def __bool__(self) -> bool:
        return bool(self.requirements or self.extras or self.packages or self.groups or self.pytest)

    def pip_arguments(self, wheels: list[str]) -> list[str]:
        """`pip install` arguments: each wheel with the extras, the files, the packages, the groups'
        requirements and pytest (unless a package or group names it and no version is asked for)."""
        extras = f"[{','.join(self.extras)}]" if self.extras else ""
        args = [f"{wheel}{extras}" for wheel in wheels]
        if not self:
            return args
        for file in self.requirements:
            args += ["--requirement", str(file)]
        named = [*self.packages, *(r for reqs in self.groups.values() for r in reqs)]
        args += named
        # pip intersects a name's requirements, so a pin beside a group's "pytest" narrows it.
        if self.pytest or not any(canonicalize_name(Requirement(r).name) == "pytest" for r in named):
            args.append(f"pytest{self.pytest}")
        return args

    def describe(self) -> str:
        names = [f.name for f in self.requirements] + [f"[{e}]" for e in self.extras]
        names += [f"group {g} ({len(reqs)})" for g, reqs in self.groups.items()] + self.packages
        names += [f"pytest{self.pytest}"] if self.pytest else []
        return ", ".join(names) or "none (the orchestrator's pytest)"


class SuiteDependencyParams(BaseModel):
    """A stage's params that name the suite's test dependencies (environment, docker_image)."""

    __test__ = False
    model_config = ConfigDict(extra="forbid", frozen=True)

    requirements: list[str] = Field(default_factory=list)  # requirements files in the checkout
    extras: list[str] = Field(default_factory=list)  # the project's extras, installed with its wheel
    dependency_groups: list[str] = Field(default_factory=list)  # PEP 735 groups of its pyproject.toml
    packages: list[str] = Field(default_factory=list)  # more requirements ("freezegun>=1.4")
    pytest: str = ""  # the pytest version it runs with (">=8,<9"); empty: the newest the sources hold

    @field_validator("requirements")
    @classmethod
    def _inside_checkout(cls, files: list[str]) -> list[str]:
        for file in files:
            path = PurePosixPath(file)
            if path.is_absolute() or ".." in path.parts:
                raise ValueError(f"{file!r}: expected a path relative to the checkout, inside it")
        return files

    @field_validator("packages")
    @classmethod
    def _requirements(cls, packages: list[str]) -> list[str]:
        for package in packages:
            try:
                Requirement(package)
            except InvalidRequirement as exc:
                reason = str(exc).splitlines()[0]  # the rest draws a caret under the name
                raise ValueError(f"{package!r}: expected a requirement like 'name>=1.0' ({reason})") from None
        return packages

    @field_validator("pytest")
    @classmethod
    def _specifier(cls, specifier: str) -> str:
        try:
            SpecifierSet(specifier)
        except InvalidSpecifier:
            raise ValueError(f"{specifier!r}: expected a version specifier like '>=8,<9'") from None
        return specifier

    @model_validator(mode="after")
    def _pytest_named_once(self) -> SuiteDependencyParams:
        if self.pytest and any(canonicalize_name(Requirement(p).name) == "pytest" for p in self.packages):
            raise ValueError(f"pytest is pinned twice: pytest: {self.pytest!r} and in packages; keep one")
        return self

    def needs_checkout(self) -> bool:
        """Whether the test dependencies are read from the night's checkout."""
        return bool(self.requirements or self.dependency_groups)

    def test_dependencies(
        self, checkout: Path | None, stage: str, commit: str | None = None
    ) -> SuiteDependencies:
        """The dependencies against the night's checkout (`commit`: its pinned sha, for errors); a
        named file or group it lacks is an error."""
        files = [checkout / f for f in self.requirements] if checkout else []
        missing = [str(f.relative_to(checkout)) for f in files if checkout and not f.is_file()]
        if missing:
            raise FileNotFoundError(f"{stage}: requirements files not in the night's checkout: {missing}")
        groups: dict[str, list[str]] = {}
        if self.dependency_groups:
            if checkout is None:
                raise DependencyGroupError(f"{stage}: dependency_groups are read from a checkout, none given")
            try:
                groups = pyproject_groups(checkout, list(self.dependency_groups), commit)
            except DependencyGroupError as exc:
                raise DependencyGroupError(f"{stage}: {exc}") from None
        return SuiteDependencies(files, list(self.extras), list(self.packages), groups, self.pytest)
