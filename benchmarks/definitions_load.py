"""How long the code location takes to load, against `import dagster` and a demo-only catalog."""

import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from nightly_assets.catalog.loader import BUILTIN_CATALOG_DIR

REPEATS = 5  # odd, so the median is one sample; each sample is a fresh interpreter of a few seconds


def interleaved(
    commands: Mapping[str, Sequence[str]], env: Mapping[str, Mapping[str, str]] | None = None
) -> dict[str, tuple[float, float]]:
    """Each command run REPEATS times in fresh processes, the commands taking turns so that a change
    in the machine's load falls on all of them alike: per command the median wall time and the median
    CPU time (user + sys). On a shared machine wall time includes waiting for a core; CPU time is
    the work the start-up does, so both are shown."""
    samples: dict[str, list[tuple[float, float]]] = {name: [] for name in commands}
    for _ in range(REPEATS):
        for name, argv in commands.items():
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            start = time.perf_counter()
            subprocess.run(
                argv, check=True, env=(env or {}).get(name), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
            )
            wall = time.perf_counter() - start
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
            samples[name].append((wall, cpu))
    return {
        name: (statistics.median(w for w, _ in runs), statistics.median(c for _, c in runs))
        for name, runs in samples.items()
    }


def main() -> dict[str, float]:
    load = "from nightly_assets.definitions import defs; defs.resolve_asset_graph()"
    with tempfile.TemporaryDirectory() as tmp:
        demo_only = Path(tmp) / "catalog"
        shutil.copytree(BUILTIN_CATALOG_DIR, demo_only, ignore=shutil.ignore_patterns("*.py", "__pycache__"))
        for doc in demo_only.glob("*/defs.yaml"):
            if doc.parent.name != "demo":
                shutil.rmtree(doc.parent)
        env = {**os.environ, "NIGHTLY_HOME": tmp}
        times = interleaved(
            {
                "baseline": [sys.executable, "-c", "import dagster"],
                "demo": [sys.executable, "-c", load],
                "full": [sys.executable, "-c", load],
            },
            {"baseline": env, "demo": {**env, "NIGHTLY_CATALOG_DIR": str(demo_only)}, "full": env},
        )
    (baseline, baseline_cpu), (demo, demo_cpu), (full, full_cpu) = (
        times["baseline"],
        times["demo"],
        times["full"],
    )
    print(f"definitions load (median of {REPEATS} fresh interpreters each, taking turns; wall / CPU)")
    print(f"  import dagster                {baseline:6.2f} s {baseline_cpu:6.2f} s   (baseline)")
    print(
        f"  demo-only catalog             {demo:6.2f} s {demo_cpu:6.2f} s   "
        f"{demo / baseline:5.2f}x / {demo_cpu / baseline_cpu:5.2f}x baseline"
    )
    print(
        f"  full catalog (7 pipelines)    {full:6.2f} s {full_cpu:6.2f} s   "
        f"{full / baseline:5.2f}x / {full_cpu / baseline_cpu:5.2f}x baseline, {full / demo:5.2f}x demo-only"
    )
    return {
        "load_vs_import_dagster": full / baseline,
        "load_vs_import_dagster_cpu": full_cpu / baseline_cpu,
        "full_vs_demo_only": full / demo,
    }
