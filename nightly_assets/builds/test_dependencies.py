"""What a suite needs besides the night's wheels, as the catalog names it (requirements files of
the checkout, extras of the project, more requirements) and as the builder installs it."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from pydantic import BaseModel, ConfigDict, Field, field_validator


@dataclass(frozen=True)
class TestDependencies:
    """Resolved against the night's checkout; every package comes from the package sources."""

    __test__ = False  # not a pytest class

    requirements: list[Path] = field(default_factory=list)
    extras: list[str] = field(default_factory=list)
    packages: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.requirements or self.extras or self.packages)

    def pip_arguments(self, wheels: list[str]) -> list[str]:
        """`pip install` arguments: each wheel with the extras, the files, the packages and pytest."""
        extras = f"[{','.join(self.extras)}]" if self.extras else ""
        args = [f"{wheel}{extras}" for wheel in wheels]
        for file in self.requirements:
            args += ["--requirement", str(file)]
        return [*args, *self.packages, "pytest"] if self else args

    def describe(self) -> str:
        names = [f.name for f in self.requirements] + [f"[{e}]" for e in self.extras] + self.packages
        return ", ".join(names) or "none (the orchestrator's pytest)"


class TestDependencyParams(BaseModel):
    """A stage's params that name the suite's test dependencies (environment, docker_image)."""

    __test__ = False
    model_config = ConfigDict(extra="forbid", frozen=True)

    requirements: list[str] = Field(default_factory=list)  # requirements files in the checkout
    extras: list[str] = Field(default_factory=list)  # the project's extras, installed with its wheel
    packages: list[str] = Field(default_factory=list)  # more requirements ("freezegun>=1.4")

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
        # Here, not at the top: only a catalog that names packages needs the parser.
        from packaging.requirements import InvalidRequirement, Requirement

        for package in packages:
            try:
                Requirement(package)
            except InvalidRequirement as exc:
                reason = str(exc).splitlines()[0]  # the rest draws a caret under the name
                raise ValueError(f"{package!r}: expected a requirement like 'name>=1.0' ({reason})") from None
        return packages

    def test_dependencies(self, checkout: Path | None, stage: str) -> TestDependencies:
        """The dependencies against the night's checkout; a named file it lacks is an error."""
        files = [checkout / f for f in self.requirements] if checkout else []
        missing = [str(f.relative_to(checkout)) for f in files if checkout and not f.is_file()]
        if missing:
            raise FileNotFoundError(f"{stage}: requirements files not in the night's checkout: {missing}")
        return TestDependencies(files, list(self.extras), list(self.packages))
