"""The field types and the strict base that every catalog model shares (models.py, runner.py,
suite.py, bazel.py build on them)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, StringConstraints

TargetName = Annotated[str, StringConstraints(pattern=r"^[a-z0-9][a-z0-9._-]*$", max_length=48)]
Arch = Literal["amd64", "arm64"]
Cron = Annotated[str, StringConstraints(pattern=r"^\S+ \S+ \S+ \S+ \S+$")]

RunnerRef = str | dict[Arch, str]  # one runner, or one per target architecture


class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _inside(value: str) -> str:
    """A path inside a checkout: relative, no `..` (it lands in a build's working directory)."""
    parts = Path(value).parts
    if value.startswith("/") or ".." in parts:
        raise ValueError(f"{value!r}: expected a path inside the checkout (relative, no '..')")
    return value


InsidePath = Annotated[str, AfterValidator(_inside)]
