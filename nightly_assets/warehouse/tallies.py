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
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from sqlalchemy import ColumnElement, func, select
from sqlalchemy.orm import Session

from nightly_assets.results import NightKey, node_id_of
from nightly_assets.warehouse.tables import SuiteTable, TestTallyTable

FAILED = ("failed", "error")
RAN = ("passed", *FAILED)  # the outcomes of a test that ran
KEY_BYTES = 8


class SuiteCounts(NamedTuple):
    """A suite's tests over a window, by test key: runs (passed, failed or errored), failures
    (failed or errored), and node ids."""

    runs: Counter[int]
    failures: Counter[int]
    node_ids: dict[int, str]


class SuiteTally:
    """The ``TestTallyTable`` row of one suite's night, gathered from its test_cases rows as
    record_test_report writes them (their test keys hashed once, for both)."""

    def __init__(self, key: NightKey, suite: str) -> None:
        self._key, self._suite = key, suite
        self._keys: list[int] = []
        self._outcomes: list[str] = []
        self._node_ids: list[str] = []

    def add(self, rows: Sequence[Mapping[str, Any]]) -> None:
        self._keys += [row["test_key"] for row in rows]
        self._outcomes += [row["outcome"] for row in rows]
        self._node_ids += [node_id_of(row["classname"], row["name"]) for row in rows]

    def row(self) -> dict[str, Any]:
        keys, outcomes = self._keys, self._outcomes
        ran = sorted((i for i, outcome in enumerate(outcomes) if outcome in RAN), key=keys.__getitem__)
        other = sorted((i for i, outcome in enumerate(outcomes) if outcome not in RAN), key=keys.__getitem__)
        order = ran + other
        return {
            "pipeline": self._key.pipeline,
            "night": self._key.night,
            "target": self._key.target,
            "suite": self._suite,
            "ran": len(ran),
            "test_keys": _pack([keys[i] for i in order]),
            "node_ids": zlib.compress(json.dumps([self._node_ids[i] for i in order]).encode(), 1),
            "failed_keys": _pack([keys[i] for i in ran if outcomes[i] in FAILED]),
        }


def window_counts(
    session: Session, pipeline: str, target: str, days: list[dt.date]
) -> dict[str, SuiteCounts] | None:
    """Per suite, how often each test that ran on `days` (newest first) of the pipeline and
    target ran and failed, and its node id; None when a suite of those nights has no tally row
    (recorded by a version without them)."""
    t, s = TestTallyTable, SuiteTable
    of_target: list[ColumnElement[bool]] = [t.pipeline == pipeline, t.target == target]
    suites = select(func.count()).where(s.pipeline == pipeline, s.target == target, s.night.in_(days))
    tallied = select(t.night, t.suite, t.ran, t.test_keys, t.failed_keys).where(*of_target, t.night.in_(days))
    rows = session.execute(tallied).all()
    if len(rows) != session.scalar(suites):
        return None
    ran_sets: dict[str, Counter[bytes]] = {}
    failures: dict[str, Counter[int]] = {}
    for _, suite, ran, packed, failed in rows:
        ran_sets.setdefault(suite, Counter())[packed[: ran * KEY_BYTES]] += 1
        failures.setdefault(suite, Counter()).update(_unpack(failed))
    runs = {suite: _runs(sets) for suite, sets in ran_sets.items()}
    nights = sorted({row[0] for row in rows}, reverse=True)
    names = _node_ids(session, of_target, nights, {suite: set(counts) for suite, counts in runs.items()})
    return {suite: SuiteCounts(counts, failures[suite], names[suite]) for suite, counts in runs.items()}


def _runs(ran_sets: Counter[bytes]) -> Counter[int]:
    """How many nights each test ran, from how many nights ran each set of keys: a set that
    recurs (the same tests ran) is counted once, not once a night."""
    runs: Counter[int] = Counter()
    for packed, nights in ran_sets.items():
        keys = _unpack(packed)
        once = dict.fromkeys(keys, nights)
        if not runs and len(once) == len(keys):  # no key twice in a night (a collision)
            runs.update(once)
        else:
            for _ in range(nights):
                runs.update(keys)
    return runs


def _node_ids(
    session: Session, of_target: list[ColumnElement[bool]], nights: list[dt.date], wanted: dict[str, set[int]]
) -> dict[str, dict[int, str]]:
    """Per suite, the node ids of the `wanted` test keys as the newest of `nights` holding the
    test names them; an older night's names are read only while a test still lacks one."""
    t = TestTallyTable
    found: dict[str, dict[int, str]] = {suite: {} for suite in wanted}
    for night in nights:
        if all(keys <= found[suite].keys() for suite, keys in wanted.items()):
            break
        named = select(t.suite, t.test_keys, t.node_ids).where(*of_target, t.night == night)
        for suite, packed, node_ids in session.execute(named):
            if suite not in wanted:
                continue
            night_names = dict(zip(_unpack(packed), json.loads(zlib.decompress(node_ids)), strict=True))
            have = found[suite]
            for test_key in wanted[suite] - have.keys() if have else ():
                if test_key in night_names:
                    have[test_key] = night_names[test_key]
            if not have:  # the suite's newest night: every name it holds
                found[suite] = night_names
    return found


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
