"""The offline package source `nightly init` makes in NIGHTLY_HOME for a host without the repository.

Local mode builds the night's wheels with PEP 517 isolation and, with no index set, installs from a
wheelhouse only. On a host where nightly_assets was installed from its wheel there is no repository
`.wheelhouse` and maybe no network, so the build backends (setuptools, wheel) and the test tools
(pytest and what it needs) are repacked into wheels from this environment's own installed copies:
their files as RECORD lists them, plus the dist-info, zipped with a fresh RECORD. Only pure-Python
distributions installed from wheels can be repacked this way; anything else is refused by name.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import importlib.metadata as metadata
import io
import os
import re
import shutil
import stat
import zipfile
from collections.abc import Iterable
from dataclasses import dataclass
from email.parser import HeaderParser
from pathlib import Path, PurePosixPath

from packaging.version import Version

from nightly_assets.builds.toolchain import installed_closure

# The build backends of setuptools projects and the test tools; their dependencies come along.
BUILD_AND_TEST_TOOLS = ("setuptools", "wheel", "pytest")
# setuptools >= 70.1 builds wheels without it, so an environment may lack it; only the projects
# whose build-system still requires it then need an index.
OPTIONAL_TOOLS = frozenset({"wheel"})
# What an installer writes into a dist-info (and the RECORD it rewrites): not part of a wheel.
_INSTALLER_FILES = frozenset(
    {"INSTALLER", "REQUESTED", "direct_url.json", "RECORD", "RECORD.jws", "RECORD.p7s"}
)
_ZIP_TIME = (1980, 1, 1, 0, 0, 0)  # the earliest a zip holds: the same files give the same wheel


class WheelhouseError(RuntimeError):
    """An installed distribution cannot be repacked into a wheel; names it and why."""


@dataclass(frozen=True)
class Wheelhouse:
    folder: Path
    made: bool  # False: it was there already and was kept as it is
    wheels: tuple[str, ...]  # file names
    missing: tuple[str, ...] = ()  # optional tools this environment does not have


def home_wheelhouse(home: Path) -> Path:
    """Where `nightly init` puts the wheelhouse: $NIGHTLY_HOME/wheelhouse."""
    return home / "wheelhouse"


def ensure_wheelhouse(folder: Path, roots: Iterable[str] = BUILD_AND_TEST_TOOLS) -> Wheelhouse:
    """`folder` as it is if it exists (an operator's or an earlier init's), else made from this
    environment's installed `roots` and their dependencies. Built beside it and renamed into place,
    so an interrupted init leaves no half wheelhouse that a later one would keep."""
    if folder.is_dir():
        return Wheelhouse(folder, made=False, wheels=tuple(sorted(p.name for p in folder.glob("*.whl"))))
    distributions, missing = installed_closure(roots, optional=OPTIONAL_TOOLS)
    folder.parent.mkdir(parents=True, exist_ok=True)
    partial = folder.with_name(f".{folder.name}.partial-{os.getpid()}")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir()
    try:
        wheels = tuple(sorted(repack(dist, partial).name for dist in distributions))
        try:
            partial.rename(folder)
        except OSError:
            if not folder.is_dir():
                raise
            return ensure_wheelhouse(folder)  # another init made it meanwhile: that one stands
    finally:
        shutil.rmtree(partial, ignore_errors=True)  # gone already once renamed
    return Wheelhouse(folder, made=True, wheels=wheels, missing=tuple(missing))


def repack(dist: metadata.Distribution, out_dir: Path) -> Path:
    """The installed pure-Python `dist` as a wheel in `out_dir`: the files its RECORD lists (each
    checked against its recorded hash), without byte code, console scripts (the installer makes them
    again from entry_points.txt) and the installer's own files, with a RECORD of what it holds."""
    name = f"{dist.metadata['Name']} {dist.version}"
    dist_info = _dist_info_dir(dist, name)
    tags = _pure_tags(dist, name)
    scripts = {ep.name for ep in dist.entry_points if ep.group in ("console_scripts", "gui_scripts")}
    entries: list[tuple[str, bytes, bool]] = []  # (name in the wheel, content, executable)
    for recorded in dist.files or []:
        arcname = recorded.as_posix()
        if "__pycache__" in recorded.parts or recorded.suffix == ".pyc":
            continue
        if PurePosixPath(arcname).parent.as_posix() == dist_info and recorded.name in _INSTALLER_FILES:
            continue
        if arcname.startswith("../") or PurePosixPath(arcname).is_absolute():
            if recorded.name in scripts:
                continue
            raise WheelhouseError(
                f"{name}: {arcname} is installed outside site-packages and is not one of its console "
                "scripts: expected a pure-Python distribution whose files are all under site-packages"
            )
        path = Path(str(dist.locate_file(recorded)))
        if not path.is_file():
            raise WheelhouseError(
                f"{name}: {path} is in its RECORD but not on disk: expected a complete installation; "
                "reinstall it"
            )
        data = path.read_bytes()
        if (
            recorded.hash is not None
            and recorded.hash.mode == "sha256"
            and _digest(data) != recorded.hash.value
        ):
            raise WheelhouseError(
                f"{name}: {path} differs from what was installed (its RECORD hash): expected the "
                "installed files unchanged; reinstall it"
            )
        entries.append((arcname, data, bool(path.stat().st_mode & stat.S_IXUSR)))
    record = f"{dist_info}/RECORD"
    entries.sort(key=lambda entry: (entry[0].startswith(f"{dist_info}/"), entry[0]))  # dist-info last
    wheel = out_dir / f"{_wheel_name(dist)}-{Version(dist.version)}-{tags}.whl"
    rows = io.StringIO()
    writer = csv.writer(rows, lineterminator="\n")
    with zipfile.ZipFile(wheel, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for arcname, data, executable in entries:
            info = zipfile.ZipInfo(arcname, date_time=_ZIP_TIME)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = ((0o755 if executable else 0o644) | stat.S_IFREG) << 16
            archive.writestr(info, data)
            writer.writerow([arcname, f"sha256={_digest(data)}", len(data)])
        writer.writerow([record, "", ""])
        info = zipfile.ZipInfo(record, date_time=_ZIP_TIME)
        info.compress_type = zipfile.ZIP_DEFLATED
        info.external_attr = (0o644 | stat.S_IFREG) << 16
        archive.writestr(info, rows.getvalue())
    return wheel


def _dist_info_dir(dist: metadata.Distribution, name: str) -> str:
    """The dist-info folder as RECORD names it (`pytest-9.2.0.dist-info`)."""
    for recorded in dist.files or []:
        parent = PurePosixPath(recorded.as_posix()).parent
        if recorded.name == "METADATA" and parent.name.endswith(".dist-info") and len(parent.parts) == 1:
            return parent.as_posix()
    raise WheelhouseError(
        f"{name}: its RECORD lists no <name>-<version>.dist-info/METADATA: expected a distribution "
        "installed from a wheel"
    )


def _pure_tags(dist: metadata.Distribution, name: str) -> str:
    """The wheel's compressed tag set (`py3-none-any`, `py2.py3-none-any`), from its WHEEL file;
    a distribution with compiled code is refused, its files would not fit another Python."""
    text = dist.read_text("WHEEL")
    if text is None:
        raise WheelhouseError(f"{name}: no WHEEL file in its dist-info: expected one installed from a wheel")
    wheel = HeaderParser().parsestr(text)
    tags = [tag.split("-") for tag in wheel.get_all("Tag") or []]
    pure = wheel.get("Root-Is-Purelib", "").strip().lower() == "true"
    if not tags or not pure or any(len(t) != 3 or t[1:] != ["none", "any"] for t in tags):
        raise WheelhouseError(
            f"{name}: its WHEEL says Root-Is-Purelib {wheel.get('Root-Is-Purelib')}, tags "
            f"{', '.join('-'.join(t) for t in tags) or 'none'}: expected a pure-Python wheel (*-none-any)"
        )
    pythons = list(dict.fromkeys(t[0] for t in tags))
    return f"{'.'.join(pythons)}-none-any"


def _wheel_name(dist: metadata.Distribution) -> str:
    """The distribution's name as a wheel file name spells it (PEP 427: runs of -_. as one _)."""
    return re.sub(r"[-_.]+", "_", dist.metadata["Name"]).lower()


def _digest(data: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
