"""Nights a `nightly run` could not finish: the warehouse was down when its run ended, so the night
and the stage it was on still read `running` there. The run notes each under
`$NIGHTLY_HOME/unfinished/` before it exits, and the next `nightly` command that reaches the
warehouse (status, tests, run, culprits) ends it as failed, with the reason, without a re-run and
without the daemon (whose `night_status_repair` also sends its alerts and writes its summary).

Imported by `nightly status` and `nightly tests`: no Dagster here.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from nightly_assets.results import NightKey

if TYPE_CHECKING:
    from nightly_assets.warehouse.store import Warehouse

UNFINISHED_FOLDER = "unfinished"
_log = logging.getLogger(__name__)


def note_unfinished(home: Path, key: NightKey, run_id: str, reason: str) -> Path:
    """Keep what is needed to end the night later: its key, its run and why it could not end."""
    folder = home / UNFINISHED_FOLDER
    folder.mkdir(parents=True, exist_ok=True)
    note = {
        "pipeline": key.pipeline,
        "night": key.night.isoformat(),
        "target": key.target,
        "run_id": run_id,
        "reason": reason,
    }
    path = folder / f"{run_id}.{key.pipeline}.{key.night.isoformat()}.{key.target}.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(note, indent=2))
    tmp.replace(path)
    return path


def end_unfinished(store: Warehouse, home: Path) -> list[str]:
    """End each noted night still `running` from its noted run: its running stages and the night
    fail with the reason. A line per night ended. A note is removed once the warehouse has taken
    it; while the warehouse is down it stays (the store's error says so to the caller)."""
    folder = home / UNFINISHED_FOLDER
    said = []
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        try:
            note = json.loads(path.read_text())
            key = NightKey(note["pipeline"], dt.date.fromisoformat(note["night"]), note["target"])
            run_id, reason = str(note["run_id"]), str(note["reason"])
        except (OSError, ValueError, KeyError, TypeError) as exc:
            _log.warning("%s is not a note of an unfinished night (%s); left as it is", path, exc)
            continue
        why = f"the warehouse could not be reached when run {run_id} ended: {reason}"
        stuck = store.end_stages(key, run_id=run_id, status="failure", why=why)
        night = store.night(key)
        ended = night is not None and night.run_id == run_id
        ended = ended and store.set_night_status(key, "failure", only_if="running", why=why)
        if stuck or ended:
            stages = f" (stages left running: {', '.join(stuck)})" if stuck else ""
            said.append(f"{key}: ended as failure{stages}; {why}")
        path.unlink(missing_ok=True)
    return said


def end_and_say(store: Warehouse, home: Path) -> None:
    """`end_unfinished`, each night it ended said on standard error (a command's first lines)."""
    for line in end_unfinished(store, home):
        print(f"nightly: {line}", file=sys.stderr)
