"""`nightly init` on a host: the packaged dagster.yaml into DAGSTER_HOME, and the wheelhouse local
mode builds offline from, repacked from this environment's own setuptools and pytest."""

import base64
import csv
import hashlib
import importlib.metadata as metadata
import io
import os
import shutil
import sys
import zipfile
from pathlib import Path

import pytest

from nightly_assets import resources
from nightly_assets.builds.resources import PythonBuildResource
from nightly_assets.builds.toolchain import MissingToolError, installed_closure
from nightly_assets.builds.wheelhouse import WheelhouseError, ensure_wheelhouse, repack
from nightly_assets.cli import main
from nightly_assets.cli.instance import PACKAGED_DAGSTER_YAML
from nightly_assets.process import run_command

ROOT = Path(__file__).resolve().parents[1]
SAMPLE_PROJECT = ROOT / "nightly_assets" / "demo" / "sample_project" / "c1_initial"


def record_problems(wheel: Path) -> list[str]:
    """What is wrong with the wheel's RECORD: a file it does not list, a hash or size that differs,
    an entry without a file; RECORD must be the last member, as installers expect."""
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        # The wheel's own (setuptools vendors packages with dist-info folders of their own).
        [record] = [n for n in names if n.endswith(".dist-info/RECORD") and n.count("/") == 1]
        rows = {row[0]: row[1:] for row in csv.reader(io.StringIO(archive.read(record).decode()))}
        problems = [] if names[-1] == record else [f"{record} is not the last member"]
        for name in names:
            if name not in rows:
                problems.append(f"{name}: not in RECORD")
            elif name != record:
                data = archive.read(name)
                digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
                if rows[name] != [f"sha256={digest}", str(len(data))]:
                    problems.append(
                        f"{name}: RECORD says {rows[name]}, the file is sha256={digest} {len(data)}"
                    )
        problems += [f"{name}: in RECORD, not in the wheel" for name in rows if name not in names]
    return problems


@pytest.fixture(scope="module")
def made_wheelhouse(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("home") / "wheelhouse"
    made = ensure_wheelhouse(folder)
    assert made.made
    return folder


def test_init_writes_the_packaged_dagster_yaml_once_and_keeps_an_operators(dagster_home, capsys):
    assert main(["init"]) == 0
    out = capsys.readouterr().out
    assert f"{dagster_home / 'dagster.yaml'}: written from the packaged instance config" in out
    assert (dagster_home / "dagster.yaml").read_bytes() == PACKAGED_DAGSTER_YAML.read_bytes()
    assert "pools aiu=2, gpu=1, rbe=4, tpu=2" in out

    (dagster_home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")  # the operator's own
    assert main(["init"]) == 0
    out = capsys.readouterr().out
    assert f"{dagster_home / 'dagster.yaml'}: already there, kept as it is" in out
    assert (dagster_home / "dagster.yaml").read_text() == "telemetry:\n  enabled: false\n"


def test_the_repository_dagster_yaml_is_the_packaged_file():
    # Readers of the repo root's file (the tests, the README, people linking it) see what init writes.
    assert (ROOT / "dagster.yaml").is_symlink()
    assert (ROOT / "dagster.yaml").resolve() == Path(str(PACKAGED_DAGSTER_YAML)).resolve()
    assert "run_coordinator" in PACKAGED_DAGSTER_YAML.read_text()


def test_init_makes_the_wheelhouse_in_local_mode_and_keeps_it_after(dagster_home, nightly_home, capsys):
    assert main(["init"]) == 0
    out = capsys.readouterr().out
    folder = nightly_home / "wheelhouse"
    wheels = sorted(p.name for p in folder.glob("*.whl"))
    assert f"{folder}: made from this environment: {', '.join(wheels)}" in out
    assert {w.split("-")[0] for w in wheels} >= {"setuptools", "pytest", "pluggy", "iniconfig", "packaging"}
    if any(w.startswith("wheel-") for w in wheels):
        assert "no wheel" not in out
    else:  # this environment lacks it (setuptools >= 70.1 builds without it): init says so
        with pytest.raises(metadata.PackageNotFoundError):
            metadata.distribution("wheel")
        assert f"{folder}: no wheel (not installed here)" in out

    (folder / wheels[0]).unlink()  # whatever is there now is the operator's
    assert main(["init"]) == 0
    out = capsys.readouterr().out
    assert f"{folder}: already there, kept as it is ({len(wheels) - 1} wheels)" in out
    assert sorted(p.name for p in folder.glob("*.whl")) == wheels[1:]


def test_init_in_prod_makes_no_wheelhouse(dagster_home, nightly_home, monkeypatch, capsys):
    monkeypatch.setenv("NIGHTLY_ENV", "prod")
    assert main(["init"]) == 0
    assert (
        "no wheelhouse made: prod takes its packages from NIGHTLY_PACKAGE_INDEX_URL"
        in capsys.readouterr().out
    )
    assert not (nightly_home / "wheelhouse").exists()


def test_repacked_wheels_have_a_correct_record_and_install_offline(made_wheelhouse, tmp_path):
    wheels = sorted(made_wheelhouse.glob("*.whl"))
    assert {p: record_problems(p) for p in wheels} == {p: [] for p in wheels}
    venv = tmp_path / "venv"
    run_command([sys.executable, "-m", "venv", "--without-pip", venv], timeout_s=120)
    pip = [sys.executable, "-m", "pip", "--python", venv / "bin" / "python"]
    run_command(
        [*pip, "install", "--no-index", "--find-links", made_wheelhouse, "pytest", "setuptools"],
        env={"PIP_CONFIG_FILE": os.devnull},
        timeout_s=300,
    )
    assert run_command([venv / "bin" / "pytest", "--version"], timeout_s=120).output.startswith(
        f"pytest {metadata.version('pytest')}"
    )


def test_a_night_build_takes_its_setuptools_backend_from_the_made_wheelhouse(made_wheelhouse, tmp_path):
    # PEP 517 isolation, no index: the backend can come from nowhere but the wheelhouse.
    builder = PythonBuildResource(toolchain_dir=str(tmp_path / "toolchain"), wheelhouse=str(made_wheelhouse))
    project = shutil.copytree(SAMPLE_PROJECT, tmp_path / "project")  # setuptools writes beside the sources
    [wheel] = builder.build_wheels(project, tmp_path / "dist", tmp_path / "build.log")
    assert wheel.name == "nightlysample-0.1.0-py3-none-any.whl"
    assert "setuptools==" + metadata.version("setuptools") in (tmp_path / "build.log").read_text()


def test_a_repack_of_a_repacked_install_gives_the_same_bytes_and_a_changed_file_is_refused(
    made_wheelhouse, tmp_path
):
    [wheel] = made_wheelhouse.glob("iniconfig-*.whl")
    site = tmp_path / "site"
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(site)  # as an installer lays it out (iniconfig has no scripts)
    [dist_info] = site.glob("iniconfig-*.dist-info")
    again = repack(metadata.PathDistribution(dist_info), tmp_path)
    assert again.read_bytes() == wheel.read_bytes()

    module = site / "iniconfig" / "__init__.py"
    module.write_text(module.read_text() + "\n# edited after install\n")
    with pytest.raises(WheelhouseError, match=r"iniconfig .*__init__\.py differs from what was installed"):
        repack(metadata.PathDistribution(dist_info), tmp_path / "refused")


def test_compiled_distributions_and_missing_ones_are_refused_by_name(tmp_path):
    with pytest.raises(WheelhouseError, match=r"PyYAML .*expected a pure-Python wheel \(\*-none-any\)"):
        repack(metadata.distribution("PyYAML"), tmp_path)
    with pytest.raises(MissingToolError, match=r"no-such-tool \(a build or test tool\) is not installed"):
        installed_closure(["pytest", "no-such-tool"])
    found, missing = installed_closure(["pytest", "no-such-tool"], optional={"no-such-tool"})
    assert missing == ["no-such-tool"] and "pluggy" in {d.metadata["Name"] for d in found}

    folder = tmp_path / "home" / "wheelhouse"
    folder.parent.mkdir()
    with pytest.raises(MissingToolError, match="no-such-tool"):
        ensure_wheelhouse(folder, roots=["pytest", "no-such-tool"])
    assert list((tmp_path / "home").iterdir()) == []  # no wheelhouse, not even half of one


def test_local_builds_use_the_checkouts_wheelhouse_else_the_one_init_made(tmp_path, monkeypatch):
    monkeypatch.delenv("NIGHTLY_PACKAGE_INDEX_URL", raising=False)
    monkeypatch.delenv("NIGHTLY_WHEELHOUSE", raising=False)
    checkout, home = tmp_path / "checkout" / ".wheelhouse", tmp_path / "home"
    monkeypatch.setattr(resources, "REPO_WHEELHOUSE", checkout)
    assert resources.local_wheelhouse("local", home) == {}  # neither: the installer's default
    (home / "wheelhouse").mkdir(parents=True)
    # Local mode's own wheelhouse first; what it lacks (a third-party night's packages) from PyPI.
    pypi = "https://pypi.org/simple"
    assert resources.local_wheelhouse("local", home) == {
        "wheelhouse": str(home / "wheelhouse"),
        "fallback_index_url": pypi,
    }
    checkout.mkdir(parents=True)
    assert resources.local_wheelhouse("local", home) == {
        "wheelhouse": str(checkout),
        "fallback_index_url": pypi,
    }
    assert resources.local_package_sources(home) == (
        f"the wheelhouse {checkout} first, then index {pypi} for what it lacks"
    )
    assert resources.local_wheelhouse("prod", home) == {}
    # A wheelhouse the operator names is the only source: offline.
    monkeypatch.setenv("NIGHTLY_WHEELHOUSE", str(home / "wheelhouse"))
    assert resources.local_wheelhouse("local", home) == {"wheelhouse": str(home / "wheelhouse")}
    assert "only" in resources.local_package_sources(home)
    monkeypatch.setenv("NIGHTLY_PACKAGE_INDEX_URL", "https://pypi.example/simple")
    assert resources.local_wheelhouse("local", home) == {}
