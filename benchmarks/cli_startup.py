"""How long `nightly` takes to answer: `--help`, `status` and `tests rates` against `python -c pass`
and `import dagster`, each a fresh process, measured in one run (taking turns)."""

import os
import subprocess
import sys
import tempfile

from benchmarks.definitions_load import REPEATS, interleaved

NIGHTLY = [sys.executable, "-m", "nightly_assets.cli"]  # what the `nightly` script runs


def main() -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "NIGHTLY_HOME": tmp, "DAGSTER_HOME": tmp, "NIGHTLY_ENV": "local"}
        env.pop("NIGHTLY_WAREHOUSE_URL", None)  # the local SQLite warehouse, empty
        # Once before measuring: the first query creates the warehouse's schema.
        subprocess.run([*NIGHTLY, "status"], check=True, env=env, stdout=subprocess.DEVNULL)
        commands = {
            "python -c pass": [sys.executable, "-c", "pass"],
            "import dagster": [sys.executable, "-c", "import dagster"],
            "nightly --help": [*NIGHTLY, "--help"],
            "nightly status": [*NIGHTLY, "status"],
            "nightly tests rates demo": [*NIGHTLY, "tests", "rates", "demo"],
        }
        times = interleaved(commands, dict.fromkeys(commands, env))
    bare, dagster = times["python -c pass"], times["import dagster"]
    print(f"CLI start-up (median of {REPEATS} fresh processes each, taking turns; wall / CPU)")
    for name, (wall, cpu) in times.items():
        print(
            f"  {name:<26} {wall:6.2f} s {cpu:6.2f} s   {wall / bare[0]:6.1f}x python -c pass, "
            f"{wall / dagster[0]:5.2f}x / {cpu / dagster[1]:5.2f}x import dagster"
        )
    return {
        "help_vs_import_dagster": times["nightly --help"][0] / dagster[0],
        "status_vs_import_dagster": times["nightly status"][0] / dagster[0],
        "tests_rates_vs_import_dagster": times["nightly tests rates demo"][0] / dagster[0],
    }
