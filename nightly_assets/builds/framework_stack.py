"""A host's framework stack that the night's environment reuses: the Python of a GPU host's torch,
JAX or CuPy install, whose packages the tested code sees instead of downloading them again.

A GPU host ships a framework build matched to its driver (torch 2.11+cu130 in /opt/torch/.venv, say).
The night's environment is a fresh venv made from that interpreter, with one `.pth` line that adds
the stack's site-packages *after* the venv's own: pip counts the stack's torch as installed (so
`dependencies = ["torch"]` downloads nothing), the night's wheels always win, and the stack itself
is never written to.
"""

from __future__ import annotations

import json
import os
import re
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from email.parser import HeaderParser
from pathlib import Path
from typing import Any

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import InvalidWheelFilename, parse_wheel_filename
from packaging.version import Version
from pydantic import BaseModel, Field, field_validator

from nightly_assets.process import CommandError, run_command

STACK_PTH = "_nightly_framework_stack.pth"  # sorts before the test toolchain's .pth: the stack's pytest wins
# `$NAME`, `${NAME}` or `${NAME:-}` (unset or empty: no stack): where the stack lives is a host's
# setting, so the catalog may name a variable instead of a path.
_VARIABLE = re.compile(
    r"^\$(?:\{(?P<braced>[A-Za-z_][A-Za-z0-9_]*)(?P<optional>:-)?\}|(?P<plain>[A-Za-z_]\w*))$"
)

# Distributions that make up a framework build, whose versions key a night's results: the
# frameworks, their compilers and plugins, and the CUDA / ROCm runtime libraries they ship as wheels.
FRAMEWORK_DISTRIBUTION = re.compile(
    r"^(torch|torchvision|torchaudio|triton|pytorch-triton(-rocm)?|torch-xla|"
    r"jax|jaxlib|jax-cuda\d+-(plugin|pjrt)|jax-rocm\d+-(plugin|pjrt)|libtpu(-nightly)?|"
    r"cupy(-cuda\d+x|-rocm-[\d-]+)?|tensorflow(-cpu|-gpu|-rocm)?|tf-nightly|tensorrt(-cu\d+)?|"
    r"nvidia-[a-z0-9-]+|cuda-python|cuda-bindings|cuda-core|cuda-toolkit|hip-python|rocm-[a-z0-9-]+|"
    r"vllm|sglang|tensorrt-llm|flash-attn|xformers|deepspeed)$"
)

# Run with the environment's Python (on this host, or in the night's image): its distributions as
# name, version and where each lives, on the last line of its output.
LIST_DISTRIBUTIONS = """
import importlib.metadata as md, json, os, sys
seen = {}
for dist in md.distributions():
    name = (dist.metadata["Name"] or "").strip()
    key = name.lower().replace("_", "-").replace(".", "-")
    if name and key not in seen:  # the first on sys.path is the one imported
        seen[key] = [dist.version, os.path.realpath(str(dist.locate_file("")))]
print(json.dumps({"version": "%d.%d" % sys.version_info[:2], "distributions": seen}))
"""

_DESCRIBE_STACK = """
import json, site, sys, sysconfig
paths = sysconfig.get_paths()
dirs = [paths["purelib"], paths["platlib"], *site.getsitepackages()]
print(json.dumps({"version": "%d.%d" % sys.version_info[:2], "full_version": sys.version.split()[0],
                  "prefix": sys.prefix, "site_dirs": list(dict.fromkeys(dirs))}))
"""


class FrameworkStackError(ValueError):
    """The framework stack a stage or runner names cannot be used; says which, and what was expected."""


class FrameworkStackParams(BaseModel):
    """A stage's params that may name the host framework stack its environment reuses."""

    # The stack's Python (a path, or `${VARIABLE}` / `${VARIABLE:-}` read at run time); unset: the
    # runner's `base_python`, else a plain venv of the orchestrator's Python.
    base_python: str | None = Field(default=None, min_length=1)

    @field_validator("base_python")
    @classmethod
    def _path_or_variable(cls, value: str | None) -> str | None:
        return check_base_python(value)


def check_base_python(value: str | None) -> str | None:
    """A catalog `base_python`: an absolute path or one variable (`$NAME`, `${NAME}`, `${NAME:-}`)."""
    if value is None or _VARIABLE.match(value) or value.startswith("/"):
        return value
    raise ValueError(
        f"{value!r}: expected the absolute path of the framework stack's Python "
        "(e.g. /opt/torch/.venv/bin/python) or a variable holding it (${NIGHTLY_BASE_PYTHON:-})"
    )


@dataclass(frozen=True)
class FrameworkStack:
    """A host's framework stack as its interpreter describes itself."""

    python: Path
    version: str  # "3.12"
    full_version: str  # "3.12.3"
    prefix: str
    site_dirs: tuple[str, ...]

    def pth_lines(self) -> str:
        # addsitedir, not bare paths: the stack's own .pth files (namespace packages, editable
        # installs) are processed as they are for its own interpreter.
        return "".join(f"import site; site.addsitedir({d!r})\n" for d in self.site_dirs if Path(d).is_dir())


def resolve_base_python(value: str | None, where: str, environ: dict[str, str] | None = None) -> Path | None:
    """The path a catalog `base_python` names tonight; None: no stack (unset, or `${NAME:-}` empty)."""
    if value is None:
        return None
    match = _VARIABLE.match(value)
    if match is None:
        return Path(value)
    name = match["braced"] or match["plain"]
    found = (environ if environ is not None else os.environ).get(name, "")
    if found:
        return Path(found)
    if match["optional"]:
        return None
    raise FrameworkStackError(
        f"{where}: base_python {value} names the variable {name}, which is not set "
        f"(set it to the framework stack's Python, or write ${{{name}:-}} to run without a stack when unset)"
    )


def describe_stack(python: Path, where: str) -> FrameworkStack:
    """Ask the stack's interpreter who it is; a missing, broken or non-Python one is named."""
    if not python.exists():
        raise FrameworkStackError(
            f"{where}: base_python {python} does not exist (expected the framework stack's Python, "
            "e.g. /opt/torch/.venv/bin/python)"
        )
    if not os.access(python, os.X_OK) or python.is_dir():
        raise FrameworkStackError(f"{where}: base_python {python} is not an executable Python interpreter")
    try:
        output = run_command([python, "-I", "-c", _DESCRIBE_STACK], timeout_s=60).output
        facts = json.loads(output.strip().splitlines()[-1])
    except (CommandError, ValueError, IndexError) as exc:
        raise FrameworkStackError(f"{where}: base_python {python} did not run as a Python: {exc}") from None
    return FrameworkStack(
        python=python,
        version=facts["version"],
        full_version=facts["full_version"],
        prefix=facts["prefix"],
        site_dirs=tuple(facts["site_dirs"]),
    )


def check_wheels_fit(stack: FrameworkStack, wheels: list[Path], where: str) -> None:
    """Every wheel of the night installs on the stack's Python: a wheel built for another CPython
    (cp311 on a 3.12 stack) or one whose Requires-Python excludes it is refused before pip runs."""
    major, minor = (int(p) for p in stack.version.split("."))
    for wheel in wheels:
        try:
            _, _, _, tags = parse_wheel_filename(wheel.name)
        except InvalidWheelFilename:
            continue  # the wheels stage's own check names a bad file
        interpreters = {tag.interpreter for tag in tags}
        fits = any(_interpreter_fits(tag.interpreter, tag.abi, major, minor) for tag in tags)
        if not fits:
            raise FrameworkStackError(
                f"{where}: base_python {stack.python} is Python {stack.version}, but the night's wheel "
                f"{wheel.name} is built for {', '.join(sorted(interpreters))}: build the wheels with the "
                f"same Python minor version as the stack"
            )
        requires = _requires_python(wheel)
        if requires is not None and Version(stack.full_version) not in requires:
            raise FrameworkStackError(
                f"{where}: base_python {stack.python} is Python {stack.full_version}, but {wheel.name} "
                f"requires Python {requires}"
            )


def _interpreter_fits(interpreter: str, abi: str, major: int, minor: int) -> bool:
    if interpreter in ("py3", f"py{major}", f"py{major}{minor}"):
        return True
    if not interpreter.startswith("cp"):
        return interpreter.startswith("py")
    built = int(interpreter[3:]) if interpreter[2:3] == str(major) and interpreter[3:].isdigit() else -1
    return built == minor or (abi == "abi3" and 0 <= built <= minor)


def _requires_python(wheel: Path) -> SpecifierSet | None:
    try:
        with zipfile.ZipFile(wheel) as archive:
            metadata = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
            text = archive.read(metadata).decode("utf-8", errors="replace")
    except (OSError, zipfile.BadZipFile, StopIteration):
        return None
    value = HeaderParser().parsestr(text).get("Requires-Python")
    try:
        return SpecifierSet(value) if value else None
    except InvalidSpecifier:
        return None


@dataclass(frozen=True)
class FrameworkPackages:
    """The framework distributions a night's environment imports: all with their versions, and
    those that come from the reused stack (inherited) rather than the night's own installs."""

    versions: dict[str, str]
    inherited: list[str]


def framework_versions(listing: str, wheels: Sequence[Path] = ()) -> dict[str, str]:
    """The framework distributions and versions in LIST_DISTRIBUTIONS' output, less the night's own
    `wheels` (what is tested: their nightly versions must not start a new baseline every night)."""
    found = json.loads(listing.strip().splitlines()[-1])["distributions"]
    own = {_wheel_name(w) for w in wheels}
    return {
        name: version
        for name, (version, _) in sorted(found.items())
        if FRAMEWORK_DISTRIBUTION.match(name) and name not in own
    }


def framework_packages(
    python: Path, stack: FrameworkStack | None = None, wheels: Sequence[Path] = ()
) -> FrameworkPackages:
    """Read the environment's framework distributions, less the night's own `wheels` (by metadata:
    nothing is imported, so a missing driver cannot break it)."""
    output = run_command([python, "-c", LIST_DISTRIBUTIONS], timeout_s=120).output
    versions = framework_versions(output, wheels)
    found = json.loads(output.strip().splitlines()[-1])["distributions"]
    stack_dirs = [os.path.realpath(d) for d in stack.site_dirs] if stack else []
    inherited = [name for name in versions if any(Path(found[name][1]).is_relative_to(d) for d in stack_dirs)]
    return FrameworkPackages(versions, inherited)


def reused_stack(
    stage_value: str | None, runner_value: str | None, where: str, wheels: list[Path]
) -> FrameworkStack | None:
    """The framework stack a night's environment is built on: the stage's `base_python`, else its
    runner's; checked to run and to fit the night's wheels. None: a plain venv."""
    path = resolve_base_python(stage_value if stage_value is not None else runner_value, where)
    if path is None:
        return None
    stack = describe_stack(path, where)
    check_wheels_fit(stack, wheels, where)
    return stack


def stack_record(python: Path, stack: FrameworkStack | None, wheels: list[Path]) -> dict[str, object]:
    """What a manifest keeps of the environment's stack: the stack, and every framework package's
    version with those inherited from the stack named. The night's own wheels are left out: they
    are what is tested, and their nightly versions must not start a new baseline every night."""
    packages = framework_packages(python, stack, wheels)
    return {
        "framework_stack": {"python": str(stack.python), "version": stack.full_version} if stack else None,
        "frameworks": packages.versions,
        "inherited": packages.inherited,
    }


def _wheel_name(wheel: Path) -> str:
    try:
        return str(parse_wheel_filename(wheel.name)[0])
    except InvalidWheelFilename:
        return wheel.name


def stack_metadata(manifest: dict[str, Any]) -> dict[str, str]:
    """The stack and framework versions (what `stack_record` wrote) as asset metadata."""
    stack = manifest["framework_stack"]
    inherited = set(manifest["inherited"])
    return {
        "framework_stack": f"{stack['python']} (Python {stack['version']})" if stack else "none",
        "frameworks": ", ".join(
            f"{n} {v}" + (" (stack)" if n in inherited else "") for n, v in manifest["frameworks"].items()
        )
        or "none",
    }
