"""Is a wheel what its file name says it is? The checks a package index would make, offline."""

from __future__ import annotations

import zipfile
from email.parser import HeaderParser
from pathlib import Path

from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename

REQUIRED_FIELDS = ("Metadata-Version", "Name", "Version")


def wheel_problems(path: Path) -> list[str]:
    """Everything wrong with one wheel, each naming the file; an empty list means valid."""
    try:
        name, version, _build, _tags = parse_wheel_filename(path.name)
    except InvalidWheelFilename as exc:
        return [f"{path.name}: file name is not a wheel name ({exc})"]
    try:
        with zipfile.ZipFile(path) as archive:
            names = archive.namelist()
            dist_info = sorted({n.split("/")[0] for n in names if n.split("/")[0].endswith(".dist-info")})
            if len(dist_info) != 1:
                return [f"{path.name}: expected one .dist-info folder, found {len(dist_info)}"]
            folder = dist_info[0]
            missing = [f for f in ("METADATA", "WHEEL", "RECORD") if f"{folder}/{f}" not in names]
            if missing:
                return [f"{path.name}: {folder} lacks {', '.join(missing)}"]
            metadata = HeaderParser().parsestr(archive.read(f"{folder}/METADATA").decode("utf-8"))
    except zipfile.BadZipFile:
        return [f"{path.name}: not a zip archive"]
    problems = [f"{path.name}: METADATA has no {f}" for f in REQUIRED_FIELDS if not metadata.get(f)]
    if metadata.get("Name") and canonicalize_name(metadata["Name"]) != name:
        problems.append(
            f"{path.name}: METADATA Name {metadata['Name']!r} differs from the file name's {name!r}"
        )
    if metadata.get("Version") and metadata["Version"] != str(version):
        problems.append(
            f"{path.name}: METADATA Version {metadata['Version']!r} differs from the file name's {version}"
        )
    return problems


def top_level_names(wheels: list[Path]) -> list[str]:
    """The import names `wheels` install at the top of site-packages (packages and modules)."""
    names: set[str] = set()
    for wheel in wheels:
        with zipfile.ZipFile(wheel) as archive:
            for entry in archive.namelist():
                first = entry.split("/")[0]
                if first.endswith((".dist-info", ".data", ".pth")):
                    continue
                names.add(first.removesuffix(".py") if "/" not in entry else first)
    return sorted(n for n in names if n.isidentifier())
