"""nightly_assets as a host without the repository gets it: the wheel, installed on its own, sets the
host up with `nightly init`; and the code location loads without the clients of services it does
not use (GCS, ECR, the tf_theta report's plots, a Kubernetes cluster)."""

import importlib.metadata as metadata
import json
import os
import shutil
import sys
import sysconfig
import zipfile
from pathlib import Path

from nightly_assets.process import run_command

ROOT = Path(__file__).resolve().parents[1]
# Imported by dagster-gcp (BigQuery, dagster-pandas), the tf_theta report, ECR's token flow and the
# kubernetes runner: none of them may load where no bucket, ECR, report or cluster is configured.
OPTIONAL_CLIENTS = (
    "pyarrow",
    "pandas",
    "numpy",
    "matplotlib",
    "boto3",
    "botocore",
    "dagster_gcp",
    "google.cloud.storage",
    "google.cloud.bigquery",
    "kubernetes",
    "dagster_k8s",
)
LOAD_THE_CODE_LOCATION = f"""
import json, sys
import nightly_assets.definitions as location
defs = location.build_definitions()  # once more, as definitions.py does: the resources built too
print(json.dumps({{
    "assets": len(list(defs.assets or [])),
    "artefacts": type(defs.resources["artefacts"]).__name__,
    "loaded": sorted(name for name in {OPTIONAL_CLIENTS!r} if name in sys.modules),
}}))
"""


def host_env(tmp_path: Path, **settings: str) -> dict[str, str]:
    """A host's settings: local mode, the homes in `tmp_path`, no Docker engine. run_command adds only
    the allow-listed variables of ours (PATH, HOME, locale): no NIGHTLY_*, DAGSTER_* or PYTHON*."""
    return {
        "NIGHTLY_ENV": "local",
        "NIGHTLY_HOME": str(tmp_path / "nightly"),
        "DAGSTER_HOME": str(tmp_path / "dagster_home"),
        "DOCKER_HOST": "unix:///nonexistent/nightly-no-docker.sock",
        **settings,
    }


def test_the_code_location_loads_without_its_optional_clients(tmp_path):
    result = run_command(
        [sys.executable, "-c", LOAD_THE_CODE_LOCATION],
        env=host_env(tmp_path, PYTHONPATH=str(ROOT)),
        cwd=tmp_path,
        timeout_s=300,
    )
    loaded = json.loads(result.output.strip().splitlines()[-1])
    assert loaded["assets"] > 0 and loaded["artefacts"] == "ArtefactStoreResource"
    assert loaded["loaded"] == []


def test_the_wheel_alone_sets_up_a_host_without_the_repository(tmp_path):
    # Only what the wheel ships: its build runs in a copy holding what deploy/Dockerfile copies.
    source = tmp_path / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    leftovers = shutil.ignore_patterns("__pycache__", "*.egg-info", "build")
    shutil.copytree(ROOT / "nightly_assets", source / "nightly_assets", ignore=leftovers)
    python = [sys.executable, "-m"]
    run_command(
        [*python, "build", "--wheel", "--no-isolation", "--outdir", tmp_path / "dist", source], timeout_s=300
    )
    [wheel] = (tmp_path / "dist").glob("nightly_assets-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        packaged_yaml = archive.read("nightly_assets/instance/dagster.yaml")
    site = tmp_path / "site"
    run_command([*python, "pip", "install", "--no-deps", "--target", site, wheel], timeout_s=300)

    # The bare interpreter (-S: no site-packages of its own, no editable install of the checkout),
    # seeing the installed wheel first and this environment's packages as its dependencies.
    environment = sysconfig.get_paths()
    dependencies = dict.fromkeys([environment["purelib"], environment["platlib"]])
    empty = tmp_path / "host"
    empty.mkdir()
    host = host_env(tmp_path, PYTHONPATH=os.pathsep.join([str(site), *dependencies]))
    bare_python = [getattr(sys, "_base_executable", sys.executable), "-S"]
    where = run_command(
        [*bare_python, "-c", "import nightly_assets; print(nightly_assets.__file__)"],
        env=host,
        cwd=empty,
        timeout_s=60,
    )
    assert Path(where.output.strip()) == site / "nightly_assets" / "__init__.py"

    init = run_command([*bare_python, "-m", "nightly_assets.cli", "init"], env=host, cwd=empty, timeout_s=300)
    home, wheelhouse = tmp_path / "dagster_home", tmp_path / "nightly" / "wheelhouse"
    assert (home / "dagster.yaml").read_bytes() == packaged_yaml == (ROOT / "dagster.yaml").read_bytes()
    assert f"{home / 'dagster.yaml'}: written from the packaged instance config" in init.output
    # Not the checkout's .wheelhouse: init ran the installed copy, which has no repository around it.
    assert (
        f"local builds take their packages from the wheelhouse {wheelhouse} first, then index "
        "https://pypi.org/simple for what it lacks" in init.output
    )
    assert list(empty.iterdir()) == []  # nothing written where it ran but what the homes name

    tools = ["setuptools", "pytest"] + (["wheel"] if _installed("wheel") else [])
    wheels = {p.name.split("-")[0] for p in wheelhouse.glob("*.whl")}
    assert set(tools) <= wheels
    venv = tmp_path / "venv"
    run_command([*python, "venv", "--without-pip", venv], timeout_s=120)
    pip = [*python, "pip", "--python", venv / "bin" / "python"]
    run_command(
        [*pip, "install", "--no-index", "--find-links", wheelhouse, *tools],
        env={"PIP_CONFIG_FILE": os.devnull},
        timeout_s=300,
    )
    version = run_command([venv / "bin" / "pytest", "--version"], cwd=empty, timeout_s=120).output
    assert version.strip() == f"pytest {metadata.version('pytest')}"


def _installed(name: str) -> bool:
    try:
        metadata.distribution(name)
    except metadata.PackageNotFoundError:
        return False
    return True
