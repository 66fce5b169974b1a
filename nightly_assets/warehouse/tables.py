"""The warehouse schema: one table per kind of nightly result, all keyed by (pipeline, night, target).

Portable across SQLite and MySQL/MariaDB:
- VARCHAR lengths keep every index under InnoDB's 3072-byte limit with utf8mb4 (4 bytes a char).
- MySQL tables use utf8mb4 with the binary collation, so comparisons and unique keys are
  case- and space-sensitive as they are on SQLite.
- Floats are DOUBLE (SQLAlchemy's ``Float`` is single precision on MySQL).
- Long free text (node ids, failure messages) is MEDIUMTEXT on MySQL, whose TEXT stops at 64 KiB.
- Test identity (suite + ``TestCase.node_id``) is indexed through ``test_cases.test_key``, a 60-bit
  hash of the node id (``node_key()``): the node id itself is too long for a MySQL index.

The store creates missing tables, columns and indexes at start (``schema_upgrade.ensure_schema``), so
an existing warehouse gets what a newer version added.
"""

from __future__ import annotations

import datetime as dt
import hashlib

from sqlalchemy import (
    BigInteger,
    Date,
    DateTime,
    Double,
    Index,
    Integer,
    LargeBinary,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.dialects import mysql
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

PIPELINE_LEN = 128
TARGET_LEN = 128
NAME_LEN = 255  # stage, suite and benchmark names
STATUS_LEN = 32
RUNNER_LEN = 128
RUN_ID_LEN = 64
UNIT_LEN = 32
CONFIG_KEY_LEN = 16  # DeviceFacts.key(): 16 hex digits

Id = BigInteger().with_variant(Integer(), "sqlite")  # SQLite autoincrements INTEGER keys only
LongText = Text().with_variant(mysql.MEDIUMTEXT(), "mysql", "mariadb")
LongBlob = LargeBinary().with_variant(mysql.LONGBLOB(), "mysql", "mariadb")  # BLOB stops at 64 KiB

_MYSQL_OPTIONS = {
    "mysql_engine": "InnoDB",
    "mysql_charset": "utf8mb4",
    "mysql_collate": "utf8mb4_bin",
}


class Base(DeclarativeBase):
    pass


class _Keyed:
    """The surrogate key and the (pipeline, night, target) columns every table starts with."""

    # BIGINT on MySQL: every re-run deletes and re-inserts, so ids are used up fast.
    id: Mapped[int] = mapped_column(Id, primary_key=True, autoincrement=True, sort_order=-4)
    pipeline: Mapped[str] = mapped_column(String(PIPELINE_LEN), sort_order=-3)
    night: Mapped[dt.date] = mapped_column(Date, sort_order=-2)
    target: Mapped[str] = mapped_column(String(TARGET_LEN), sort_order=-1)


class NightTable(_Keyed, Base):
    __tablename__ = "nights"
    __table_args__ = (
        UniqueConstraint("pipeline", "night", "target", name="uq_nights_key"),
        _MYSQL_OPTIONS,
    )

    run_id: Mapped[str] = mapped_column(String(RUN_ID_LEN))
    status: Mapped[str] = mapped_column(String(STATUS_LEN))
    pins: Mapped[str] = mapped_column(Text)  # JSON object: repo name -> commit sha
    updated_at: Mapped[dt.datetime] = mapped_column(DateTime)  # naive UTC
    # Why the night ended as it did where no stage says it (a run the warehouse lost track of).
    detail: Mapped[str | None] = mapped_column(LongText)


class StageTable(_Keyed, Base):
    """The latest outcome of each stage of a night (running while a run has it): what Dagster's
    partition shows. Every outcome of every run stays in ``StageRunTable``."""

    __tablename__ = "stages"
    __table_args__ = (
        UniqueConstraint("pipeline", "night", "target", "stage", name="uq_stages_key"),
        _MYSQL_OPTIONS,
    )

    stage: Mapped[str] = mapped_column(String(NAME_LEN))
    status: Mapped[str] = mapped_column(String(STATUS_LEN))
    runner: Mapped[str] = mapped_column(String(RUNNER_LEN))
    duration_s: Mapped[float] = mapped_column(Double)
    artefact: Mapped[str | None] = mapped_column(Text)
    run_id: Mapped[str] = mapped_column(String(RUN_ID_LEN))
    detail: Mapped[str | None] = mapped_column(LongText)


class StageRunTable(_Keyed, Base):
    """Every outcome of every stage of a night, one row per run that ran it, never replaced: the
    night's record of its runs (which run is current, what each found). `follows`: the run a
    follow-up (a summary run) wrote it for, "" for a run of its own. `artefact` is where its
    folder is now: an earlier attempt's folder moves under ``.runs/`` when a later one replaces it."""

    __tablename__ = "stage_runs"
    __table_args__ = (Index("ix_stage_runs_key", "pipeline", "night", "target", "run_id"), _MYSQL_OPTIONS)

    stage: Mapped[str] = mapped_column(String(NAME_LEN))
    run_id: Mapped[str] = mapped_column(String(RUN_ID_LEN))
    follows: Mapped[str] = mapped_column(String(RUN_ID_LEN))
    status: Mapped[str] = mapped_column(String(STATUS_LEN))
    runner: Mapped[str] = mapped_column(String(RUNNER_LEN))
    duration_s: Mapped[float] = mapped_column(Double)
    artefact: Mapped[str | None] = mapped_column(Text)
    detail: Mapped[str | None] = mapped_column(LongText)
    recorded_at: Mapped[dt.datetime] = mapped_column(DateTime)  # naive UTC


class SuiteTable(_Keyed, Base):
    __tablename__ = "suites"
    __table_args__ = (
        UniqueConstraint("pipeline", "night", "target", "suite", name="uq_suites_key"),
        _MYSQL_OPTIONS,
    )

    suite: Mapped[str] = mapped_column(String(NAME_LEN))
    runner: Mapped[str] = mapped_column(String(RUNNER_LEN))
    total: Mapped[int]
    passed: Mapped[int]
    failed: Mapped[int]
    error: Mapped[int]
    skipped: Mapped[int]
    collected: Mapped[int]
    duration_s: Mapped[float] = mapped_column(Double)
    collect_only: Mapped[bool]
    # The run that reported it: a later run replaces it only with its own report. "" for rows
    # from before it was recorded (the column's default when an older warehouse gets it).
    run_id: Mapped[str] = mapped_column(String(RUN_ID_LEN), server_default="")


def node_key(node_id: str) -> int:
    """The indexed stand-in of a test's node id: the first 60 bits of its UTF-8 MD5, as MySQL's
    ``CONV(LEFT(MD5(node_id), 15), 16, 10)`` computes it (a positive BIGINT)."""
    return int(hashlib.md5(node_id.encode("utf-8"), usedforsecurity=False).hexdigest()[:15], 16)


class TestCaseTable(_Keyed, Base):
    """One row per test case. Not unique-indexed: node ids are too long for a MySQL index;
    the store keeps them unique by replacing a suite's rows as a whole.

    A test is (pipeline, target, suite, node id); ``test_key`` hashes the node id so that
    indexes can hold it: ``ix_test_cases_test`` finds one test's nights (its history) and covers
    counting its outcomes, ``ix_test_cases_outcome`` finds a night's cases by outcome (newly
    failing tests, the tests that failed in a window) and covers counting every test's outcomes.
    Both stay under InnoDB's 3072-byte key limit with utf8mb4."""

    __test__ = False  # not a pytest test class
    __tablename__ = "test_cases"
    __table_args__ = (
        Index("ix_test_cases_key", "pipeline", "night", "target", "suite"),
        Index("ix_test_cases_test", "pipeline", "suite", "test_key", "night", "target", "outcome"),
        Index("ix_test_cases_outcome", "pipeline", "target", "night", "outcome", "suite", "test_key"),
        _MYSQL_OPTIONS,
    )

    suite: Mapped[str] = mapped_column(String(NAME_LEN))
    classname: Mapped[str] = mapped_column(LongText)
    name: Mapped[str] = mapped_column(LongText)
    outcome: Mapped[str] = mapped_column(String(16))
    duration_s: Mapped[float] = mapped_column(Double)
    message: Mapped[str | None] = mapped_column(LongText)
    attempts: Mapped[int]
    # NULL only while an older warehouse is being migrated (the store fills it in at start).
    test_key: Mapped[int | None] = mapped_column(BigInteger)


class TestTallyTable(_Keyed, Base):
    """One suite's tests on a night in a few values, written, replaced and cleared with its
    test_cases rows (``tallies.py``), so that every test's pass rate over a window reads one row
    per suite and night instead of every case. `test_keys` holds each case's ``test_key`` (8
    bytes, little-endian): the `ran` that passed, failed or errored first, then the rest (skips,
    collect-only), each part in key order, so that a suite whose tests all ran on two nights
    holds the same bytes for both; `node_ids` their node ids in the same order (zlib, a JSON
    list); `failed_keys` the keys of the failures and errors."""

    __test__ = False
    __tablename__ = "test_tallies"
    __table_args__ = (
        UniqueConstraint("pipeline", "night", "target", "suite", name="uq_test_tallies_key"),
        _MYSQL_OPTIONS,
    )

    suite: Mapped[str] = mapped_column(String(NAME_LEN))
    ran: Mapped[int]
    test_keys: Mapped[bytes] = mapped_column(LongBlob)
    node_ids: Mapped[bytes] = mapped_column(LongBlob)
    failed_keys: Mapped[bytes] = mapped_column(LongBlob)


class TestEvidenceTable(_Keyed, Base):
    """Flaky evidence the final test_cases row cannot show, kept at write time so the flaky-test
    queries find it through an index instead of scanning a window's passes: `retry`, a test that
    passed after a retry (its suite's rows hold it too; replaced with them), and `rerun`, an
    earlier run of the night whose outcome the newer run's disagrees with (`outcome` is the
    earlier one's; kept when the suite is replaced: it is the night's history)."""

    __test__ = False
    __tablename__ = "test_evidence"
    __table_args__ = (
        Index("ix_test_evidence_key", "pipeline", "target", "night", "suite"),
        _MYSQL_OPTIONS,
    )

    suite: Mapped[str] = mapped_column(String(NAME_LEN))
    test_key: Mapped[int] = mapped_column(BigInteger)
    kind: Mapped[str] = mapped_column(String(16))  # "retry" or "rerun"
    outcome: Mapped[str] = mapped_column(String(16))


class TestVerdictTable(_Keyed, Base):
    """A test that was not plainly stable over the window ending on the key's night: its verdict
    (flaky, broken or insufficient), why, whether its failures are in quarantine, and for a
    broken test where it broke and the suspect commits (JSON: repo -> {good, bad, commits})."""

    __test__ = False
    __tablename__ = "test_verdicts"
    __table_args__ = (
        Index("ix_test_verdicts_key", "pipeline", "night", "target", "suite"),
        _MYSQL_OPTIONS,
    )

    suite: Mapped[str] = mapped_column(String(NAME_LEN))
    test_key: Mapped[int] = mapped_column(BigInteger)
    test_id: Mapped[str] = mapped_column(LongText)
    state: Mapped[str] = mapped_column(String(16))
    reason: Mapped[str] = mapped_column(LongText)
    pass_rate: Mapped[float | None] = mapped_column(Double)
    quarantined: Mapped[bool]
    new_failure: Mapped[bool]  # broken tonight and not the night before
    first_bad: Mapped[dt.date | None] = mapped_column(Date)
    last_good: Mapped[dt.date | None] = mapped_column(Date)
    suspects: Mapped[str] = mapped_column(LongText)


class BenchmarkTable(_Keyed, Base):
    """One benchmark's value on a night, with the device configuration it ran on (`config_key`:
    ``DeviceFacts.key()``; empty for rows from before it was recorded and for benchmarks recorded
    without devices). ``ix_benchmarks_series`` finds one configuration's nights of a benchmark,
    the series its baseline is made of."""

    __tablename__ = "benchmarks"
    __table_args__ = (
        UniqueConstraint("pipeline", "night", "target", "name", name="uq_benchmarks_key"),
        Index("ix_benchmarks_series", "pipeline", "target", "name", "config_key", "night"),
        _MYSQL_OPTIONS,
    )

    name: Mapped[str] = mapped_column(String(NAME_LEN))
    value: Mapped[float] = mapped_column(Double)
    unit: Mapped[str] = mapped_column(String(UNIT_LEN))
    lower_is_better: Mapped[bool]
    # server_default: the rows of an older warehouse get "" when the column is added (connection.py).
    config_key: Mapped[str] = mapped_column(String(CONFIG_KEY_LEN), server_default="")


class DeviceFactsTable(_Keyed, Base):
    """What one stage of the night ran on (``DeviceFacts``), one column per fact so that SQL can
    ask which nights ran on which GPU, driver or runtime; the framework versions and the device
    ids handed out are JSON (name -> version; a list). `config_key` is ``DeviceFacts.key()``."""

    __tablename__ = "device_facts"
    __table_args__ = (
        UniqueConstraint("pipeline", "night", "target", "stage", name="uq_device_facts_key"),
        Index("ix_device_facts_config", "config_key", "night"),
        _MYSQL_OPTIONS,
    )

    stage: Mapped[str] = mapped_column(String(NAME_LEN))
    runner: Mapped[str] = mapped_column(String(RUNNER_LEN))
    vendor: Mapped[str] = mapped_column(String(16))
    model: Mapped[str] = mapped_column(Text)  # several models on one host are joined with " + "
    count: Mapped[int]
    memory_mib: Mapped[int]
    driver: Mapped[str] = mapped_column(String(NAME_LEN))
    runtime: Mapped[str] = mapped_column(String(NAME_LEN))
    mig: Mapped[bool]
    devices: Mapped[str] = mapped_column(Text)  # JSON list of the ids handed out
    frameworks: Mapped[str] = mapped_column(Text)  # JSON object: distribution name -> version
    config_key: Mapped[str] = mapped_column(String(CONFIG_KEY_LEN))


class RegressionTable(_Keyed, Base):
    """A benchmark's change confirmed on the key's night: the first night at the new level, the
    last one at the old, both levels, and the commits between the two nights (JSON: repo ->
    {"good": sha, "bad": sha, "commits": [{"sha", "author", "subject"}, ...]})."""

    __tablename__ = "regressions"
    __table_args__ = (
        UniqueConstraint("pipeline", "night", "target", "name", name="uq_regressions_key"),
        _MYSQL_OPTIONS,
    )

    name: Mapped[str] = mapped_column(String(NAME_LEN))
    first_bad: Mapped[dt.date] = mapped_column(Date)
    last_good: Mapped[dt.date] = mapped_column(Date)
    before: Mapped[float] = mapped_column(Double)
    after: Mapped[float] = mapped_column(Double)
    unit: Mapped[str] = mapped_column(String(UNIT_LEN))
    worse: Mapped[bool]
    commits: Mapped[str] = mapped_column(LongText)


class CulpritTable(_Keyed, Base):
    """A culprit search of the key's night: for one new failure or regression (`subject`: the
    suite and test ids, or the benchmark), the first bad commit it names, or why it names none
    (`outcome`: found, not reproduced, inconclusive, not searchable), and its probes (JSON)."""

    __tablename__ = "culprits"
    __table_args__ = (Index("ix_culprits_key", "pipeline", "night", "target"), _MYSQL_OPTIONS)

    subject: Mapped[str] = mapped_column(LongText)
    outcome: Mapped[str] = mapped_column(String(STATUS_LEN))
    repo: Mapped[str | None] = mapped_column(String(NAME_LEN))
    commit: Mapped[str | None] = mapped_column(String(64))
    author: Mapped[str | None] = mapped_column(Text)
    title: Mapped[str | None] = mapped_column(Text)  # the commit's subject line
    detail: Mapped[str] = mapped_column(LongText)
    probes: Mapped[str] = mapped_column(LongText)


class CostTable(_Keyed, Base):
    """What a stage's rented machine cost (seed 003: a TPU VM's lifetime x its hourly price)."""

    __tablename__ = "costs"
    __table_args__ = (
        UniqueConstraint("pipeline", "night", "target", "stage", name="uq_costs_key"),
        _MYSQL_OPTIONS,
    )

    stage: Mapped[str] = mapped_column(String(NAME_LEN))
    machine: Mapped[str] = mapped_column(Text)  # e.g. projects/p/locations/z/nodes/n
    machine_type: Mapped[str] = mapped_column(String(NAME_LEN))
    lifetime_s: Mapped[float] = mapped_column(Double)
    hourly_usd: Mapped[float] = mapped_column(Double)
    cost_usd: Mapped[float] = mapped_column(Double)
    ended: Mapped[str] = mapped_column(String(STATUS_LEN))  # "completed" or why the machine went early


class CheckTable(_Keyed, Base):
    """The outcome of one asset check of one stage: a failed WARN check makes the night `warn`."""

    __tablename__ = "checks"
    __table_args__ = (
        UniqueConstraint("pipeline", "night", "target", "stage", "name", name="uq_checks_key"),
        _MYSQL_OPTIONS,
    )

    stage: Mapped[str] = mapped_column(String(NAME_LEN))
    name: Mapped[str] = mapped_column(String(NAME_LEN))
    severity: Mapped[str] = mapped_column(String(STATUS_LEN))  # "ERROR" or "WARN"
    passed: Mapped[bool]
    description: Mapped[str | None] = mapped_column(LongText)
    run_id: Mapped[str] = mapped_column(String(RUN_ID_LEN))


class AlertTable(_Keyed, Base):
    """An alert sent about a night: how bad, what it said, where it went and the run it is about
    ("" for a night that never got its summary). Kept as sent, never replaced."""

    __tablename__ = "alerts"
    __table_args__ = (Index("ix_alerts_key", "pipeline", "night", "target", "run_id"), _MYSQL_OPTIONS)

    run_id: Mapped[str] = mapped_column(String(RUN_ID_LEN))
    severity: Mapped[str] = mapped_column(String(STATUS_LEN))  # "error" or "warn"
    title: Mapped[str] = mapped_column(Text)
    text: Mapped[str] = mapped_column(LongText)
    destination: Mapped[str] = mapped_column(Text)  # the file or the Slack channel; never a token
    sent_at: Mapped[dt.datetime] = mapped_column(DateTime)  # naive UTC


class LeaseTable(_Keyed, Base):
    """Which run is running a night x target now (see night_lease.py); one row per night at most."""

    __tablename__ = "leases"
    __table_args__ = (
        UniqueConstraint("pipeline", "night", "target", name="uq_leases_key"),
        _MYSQL_OPTIONS,
    )

    run_id: Mapped[str] = mapped_column(String(RUN_ID_LEN))
    taken_at: Mapped[dt.datetime] = mapped_column(DateTime)  # naive UTC


ALL_TABLES: tuple[type[Base], ...] = (
    NightTable,
    StageTable,
    StageRunTable,
    SuiteTable,
    TestCaseTable,
    TestTallyTable,
    TestEvidenceTable,
    TestVerdictTable,
    BenchmarkTable,
    RegressionTable,
    CulpritTable,
    CostTable,
    CheckTable,
    AlertTable,
    LeaseTable,
    DeviceFactsTable,
)
