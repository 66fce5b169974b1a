"""Every test's pass rate over a window from ``TestTallyTable``: one row per suite and night,
written with the suite's test_cases rows, instead of one per case. At 120,000 cases a night the
database alone needs seconds to group a week of case rows by test; these rows are counted here
in a fraction of that. Nights recorded before the table existed have no tally rows: the caller
then counts the case rows (``history.pass_rates``)."""

from __future__ import annotations

import datetime as dt
import json
import sys
import zlib
from array import array
from collections import Counter
from collections.abc import Iterable
from typing import Any

from sqlalchemy import ColumnElement, func, select
from sqlalchemy.orm import Session

from nightly_assets.results import NightKey, TestCase
from nightly_assets.warehouse.tables import SuiteTable, TestTallyTable, node_key

TestId = tuple[str, int]  # (suite, test_key)
RUNS = ("passed", "failed", "error")


def tally_row(key: NightKey, suite: str, cases: Iterable[TestCase]) -> dict[str, Any]:
    """The ``TestTallyTable`` row of a suite's cases (what record_test_report writes with them)."""
    passed: list[TestCase] = []
    failed: list[TestCase] = []
    other: list[TestCase] = []
    for case in cases:
        (passed if case.outcome == "passed" else failed if case.outcome in RUNS else other).append(case)
    ordered = passed + failed + other
    return {
        "pipeline": key.pipeline,
        "night": key.night,
        "target": key.target,
        "suite": suite,
        "passed": len(passed),
        "failed": len(failed),
        "test_keys": _pack([node_key(c.node_id) for c in ordered]),
        "node_ids": zlib.compress(json.dumps([c.node_id for c in ordered]).encode(), 1),
    }


def window_tallies(
    session: Session, pipeline: str, target: str, days: list[dt.date]
) -> dict[TestId, tuple[int, int, str]] | None:
    """(runs, passed, node id) of every test that ran on `days` (newest first) of the pipeline
    and target, from the tally rows; None when a suite of those nights has none (recorded by a
    version without them). The node id is the one of the test's newest night."""
    t, s = TestTallyTable, SuiteTable
    in_window: list[ColumnElement[bool]] = [t.pipeline == pipeline, t.target == target, t.night.in_(days)]
    suites = select(func.count()).where(s.pipeline == pipeline, s.target == target, s.night.in_(days))
    rows = session.execute(select(t.night, t.suite, t.passed, t.failed, t.test_keys).where(*in_window)).all()
    if len(rows) != session.scalar(suites):
        return None
    runs: dict[str, Counter[int]] = {}
    passes: dict[str, Counter[int]] = {}
    for _, suite, passed, failed, packed in rows:
        keys = _unpack(packed)
        runs.setdefault(suite, Counter()).update(keys[: passed + failed])
        passes.setdefault(suite, Counter()).update(keys[:passed])
    names: dict[TestId, str] = {}
    missing = {(suite, k) for suite, counts in runs.items() for k in counts}
    # Names from the newest night on, each night's read only while a test still lacks one.
    for night in sorted({r[0] for r in rows}, reverse=True):
        if not missing:
            break
        named = select(t.suite, t.test_keys, t.node_ids).where(*in_window[:2], t.night == night)
        for suite, packed, node_ids in session.execute(named):
            for test_key, node_id in zip(_unpack(packed), json.loads(zlib.decompress(node_ids)), strict=True):
                if (suite, test_key) in missing:
                    names[(suite, test_key)] = node_id
                    missing.discard((suite, test_key))
    return {
        (suite, k): (n, passes[suite][k], names[(suite, k)])
        for suite, counts in runs.items()
        for k, n in counts.items()
    }


def _pack(keys: list[int]) -> bytes:
    packed = array("q", keys)
    if sys.byteorder == "big":
        packed.byteswap()
    return packed.tobytes()


def _unpack(data: bytes) -> array[int]:
    keys = array("q")
    keys.frombytes(data)
    if sys.byteorder == "big":
        keys.byteswap()
    return keys
