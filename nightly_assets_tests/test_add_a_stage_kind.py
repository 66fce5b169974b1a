"""The "Adding a stage kind" steps of docs/architecture.md, followed literally: its example module
written where it says, into a copy of the package, and its stage entry added to a pipeline's defs.yaml; the
code location built from that copy (in a process of its own) has the stage's asset, and a typo
in the stage's `params` fails the load naming the field."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import yaml

import nightly_assets
from nightly_assets_tests.catalog_files import edit_pipeline

ROOT = Path(nightly_assets.__file__).parent.parent
DOC = "docs/architecture.md"  # where the steps are written
SECTION = "## Adding a stage kind"
PIPELINE = "demo"  # the pipeline the doc's step 2 adds the stage to

# Run in the copy: the definitions as the code location builds them, then the catalog with a typo.
PROBE = """
import json, sys
from pathlib import Path
import dagster as dg
import nightly_assets
from nightly_assets.catalog.loader import CatalogError, load_catalog
from nightly_assets.definitions import defs
from nightly_assets.stage_kinds import stage_kind

key, kind, bad_catalog = sys.argv[1:]
asset_key = dg.AssetKey(key.split("/"))
spec = defs.resolve_assets_def(asset_key).specs_by_key[asset_key]
try:
    load_catalog(Path(bad_catalog))
    refused = ""
except CatalogError as exc:
    refused = str(exc)
print(json.dumps({
    "package": nightly_assets.__file__,
    "kinds": sorted(spec.kinds),
    "kind_tags": sorted(stage_kind(kind).kinds),
    "tags": dict(spec.tags),
    "deps": sorted(d.asset_key.to_user_string() for d in spec.deps),
    "refused": refused,
}))
"""


def readme_blocks(readme: str, heading: str) -> dict[str, str]:
    """The first fenced block of each language in the doc's section under `heading`."""
    section = readme.split(heading, 1)[1].split("\n## ", 1)[0]
    blocks: dict[str, str] = {}
    for language, body in re.findall(r"```(\w+)\n(.*?)\n *```", section, flags=re.S):
        blocks.setdefault(language, textwrap.dedent(body) + "\n")
    return blocks


def package_copy(dest: Path) -> Path:
    shutil.copytree(
        ROOT / "nightly_assets", dest / "nightly_assets", ignore=shutil.ignore_patterns("__pycache__")
    )
    return dest


def probe(copy: Path, key: str, kind: str, bad_catalog: Path, home: Path) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NIGHTLY_")}
    env |= {"PYTHONPATH": str(copy), "NIGHTLY_HOME": str(home)}
    result = subprocess.run(
        [sys.executable, "-c", PROBE, key, kind, str(bad_catalog)],
        cwd=copy,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_the_readmes_stage_kind_steps_give_a_loading_pipeline(tmp_path: Path) -> None:
    blocks = readme_blocks((ROOT / DOC).read_text(), SECTION)
    module, stage_yaml = blocks["python"], blocks["yaml"]
    path = module.splitlines()[0].removeprefix("# ").strip()  # step 1: where the module goes
    assert path.startswith("nightly_assets/stage_kinds/") and path.endswith(".py"), path
    copy = package_copy(tmp_path / "copy")
    assert not (copy / path).exists(), f"{path}: the example names a kind the package already has"
    (copy / path).write_text(module)

    [stage] = yaml.safe_load(stage_yaml)  # step 2: the stage, in a pipeline's defs.yaml
    catalog = copy / "nightly_assets" / "defs"
    edit_pipeline(catalog, PIPELINE, lambda document: document["stages"].append(stage))
    bad = shutil.copytree(catalog, tmp_path / "bad_catalog", ignore=shutil.ignore_patterns("*.py"))
    typo = {**stage, "params": {f"{k}x": v for k, v in stage.get("params", {"repo": "x"}).items()}}
    edit_pipeline(bad, PIPELINE, lambda document: document["stages"].__setitem__(-1, typo))

    found = probe(copy, f"{PIPELINE}/{stage['name']}", stage["kind"], bad, tmp_path / "home")
    assert Path(found["package"]).is_relative_to(copy)  # the copy was loaded, not this checkout
    assert found["tags"]["nightly/stage_kind"] == stage["kind"]
    assert found["deps"] == [f"{PIPELINE}/{d}" for d in stage["deps"]]
    assert found["kinds"] == found["kind_tags"]  # the kind's tags, as its KIND says
    assert f"{PIPELINE}/defs.yaml" in found["refused"]
    assert f"params.{next(iter(typo['params']))}" in found["refused"]
