"""The night results as JSON another dashboard (a HUD) can ingest, schema ``nightly-results/1``:

``results/index.json``::

    {"schema": "nightly-results/1", "pipeline": str, "built_at": ISO-8601 UTC,
     "nights": [{"night": "YYYY-MM-DD", "target": str, "status": str, "path": str}]}   # newest first

``results/<night>/<target>.json``::

    {"schema": "nightly-results/1", "pipeline": str, "night": str, "target": str,
     "status": "success" | "warn" | "partial" | "cancelled" | "failure" | "running",
     "pins": {repo: sha},
     "stages": [{"name": str, "status": str, "duration_s": float, "evidence": url}],
     "suites": {suite: {"total": int, "passed": int, "failed": int, "error": int,
                        "skipped": int, "collected": int}},
     "failed_tests": [{"suite": str, "test": str, "outcome": "failed" | "error",
                       "message": str | null}],
     "checks": [{"stage": str, "name": str, "severity": "ERROR" | "WARN", "passed": bool}],
     "devices": [str]}

A new field may appear within a schema version; a removed or renamed one makes a new version.
"""

from __future__ import annotations

import json
from typing import Any

from nightly_assets.results import NightKey
from nightly_assets.site.data import SiteData
from nightly_assets.site.pages import SCHEMA, FolderUrl
from nightly_assets.warehouse.rows import NightOverview
from nightly_assets.warehouse.store import Warehouse

INDEX = "results/index.json"
MESSAGE_CHARS = 2000


def night_path(key: NightKey) -> str:
    return f"results/{key.night.isoformat()}/{key.target}.json"


def dumps(document: dict[str, Any]) -> str:
    return json.dumps(document, indent=1, sort_keys=False) + "\n"


def index_document(data: SiteData) -> dict[str, Any]:
    return {
        "schema": SCHEMA,
        "pipeline": data.pipeline.name,
        "built_at": data.built_at.isoformat(timespec="seconds") + "Z",
        "nights": [
            {
                "night": o.night.night.isoformat(),
                "target": o.night.target,
                "status": o.night.status,
                "path": night_path(o.night.key).removeprefix("results/"),
            }
            for o in data.nights
        ],
    }


def night_document(
    overview: NightOverview, data: SiteData, store: Warehouse, folder_url: FolderUrl
) -> dict[str, Any]:
    key = overview.night.key
    stages = data.stage_rows.get(key, [])
    failed = [
        {"suite": suite, "test": case.node_id, "outcome": case.outcome, "message": _cut(case.message)}
        for suite in overview.suites
        for case in store.failed_cases(key, suite)
    ]
    return {
        "schema": SCHEMA,
        "pipeline": key.pipeline,
        "night": key.night.isoformat(),
        "target": key.target,
        "status": overview.night.status,
        "pins": dict(sorted(overview.night.pins.items())),
        "stages": [
            {
                "name": row.stage,
                "status": row.status,
                "duration_s": round(row.duration_s, 3),
                "evidence": folder_url(key, row.stage),
            }
            for row in stages
        ],
        "suites": overview.suites,
        "failed_tests": failed,
        "checks": [
            {"stage": c.stage, "name": c.name, "severity": c.severity, "passed": c.passed}
            for c in overview.checks
        ],
        "devices": data.device_lines.get(key, []),
    }


def _cut(message: str | None) -> str | None:
    return None if message is None else message[:MESSAGE_CHARS]
