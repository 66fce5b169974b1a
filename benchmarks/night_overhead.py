"""Orchestration overhead: a demo night's wall time against the sum of its steps' own durations."""

import datetime as dt
import os
import tempfile
import time
from pathlib import Path

import dagster as dg

NIGHTS = ("2026-11-03", "2026-11-13")


def main() -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["NIGHTLY_HOME"] = str(Path(tmp) / "nightly")
        os.environ.pop("NIGHTLY_WAREHOUSE_URL", None)
        (Path(tmp) / "dagster").mkdir()
        from nightly_assets.catalog.loader import load_catalog
        from nightly_assets.definitions import build_definitions
        from nightly_assets.night import run_night
        from nightly_assets.resources import resources_for
        from nightly_assets.results import NightKey
        from nightly_assets.settings import nightly_home

        defs, catalog = build_definitions(), load_catalog()
        resources = resources_for("local", nightly_home())
        ratios = []
        print("demo night: wall time vs the sum of its steps' durations")
        with dg.instance_for_test(temp_dir=str(Path(tmp) / "dagster")) as instance:
            for night in NIGHTS:
                key = NightKey("demo", dt.date.fromisoformat(night), "cpu")
                start = time.perf_counter()
                outcome = run_night(defs, instance, catalog, key, resources)
                wall = time.perf_counter() - start
                steps = sum(
                    r.get_dagster_event().step_success_data.duration_ms / 1000
                    for r in instance.all_logs(outcome.run.run_id, of_type=dg.DagsterEventType.STEP_SUCCESS)
                )
                ratios.append(wall / steps)
                print(
                    f"  {night}: wall {wall:6.2f} s, steps {steps:6.2f} s, "
                    f"overhead {wall - steps:5.2f} s, ratio {wall / steps:4.2f}x"
                )
    return {"night_wall_vs_steps": max(ratios)}
