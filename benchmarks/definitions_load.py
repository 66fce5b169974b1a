"""How long the code location takes to load, against `import dagster` and a demo-only catalog."""

import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from nightly_assets.catalog.loader import BUILTIN_CATALOG_DIR

REPEATS = 5


def _seconds(code: str, env: dict[str, str] | None = None) -> float:
    samples = []
    for _ in range(REPEATS):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], check=True, env=env)
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def main() -> dict[str, float]:
    import os

    load = "from nightly_assets.definitions import defs; defs.resolve_asset_graph()"
    with tempfile.TemporaryDirectory() as tmp:
        demo_only = Path(tmp) / "catalog"
        shutil.copytree(BUILTIN_CATALOG_DIR, demo_only, ignore=shutil.ignore_patterns("*.py", "__pycache__"))
        for doc in demo_only.glob("*/defs.yaml"):
            if doc.parent.name != "demo":
                shutil.rmtree(doc.parent)
        env = {**os.environ, "NIGHTLY_HOME": tmp}
        baseline = _seconds("import dagster", env)
        demo = _seconds(load, {**env, "NIGHTLY_CATALOG_DIR": str(demo_only)})
        full = _seconds(load, env)
    print(f"definitions load (median of {REPEATS} fresh interpreters)")
    print(f"  import dagster                {baseline:6.2f} s   (baseline)")
    print(f"  demo-only catalog             {demo:6.2f} s   {demo / baseline:5.2f}x baseline")
    print(
        f"  full catalog (7 pipelines)    {full:6.2f} s   {full / baseline:5.2f}x baseline, "
        f"{full / demo:5.2f}x demo-only"
    )
    return {"load_vs_import_dagster": full / baseline, "full_vs_demo_only": full / demo}
