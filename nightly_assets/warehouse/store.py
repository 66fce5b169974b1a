"""The results warehouse: the ``Warehouse`` class, the only code that reads and writes the tables
of ``tables.py``. It is made of one concern a file:
- ``writes.py``: every write, each replacing the rows of one key in one transaction;
- ``reads.py``: every read, returning the values of ``rows.py`` and ``history.py``;
- ``pipeline_reads.py``: reads over a whole pipeline's nights (the results site);
- ``access.py``: the database opened, its schema upgraded at start (``schema_upgrade.py``), and
  the transactions both run in, retried through transient errors (``connection.py``).
Works on SQLite and on MySQL/MariaDB (PyMySQL).
"""

from __future__ import annotations

from nightly_assets.warehouse.pipeline_reads import PipelineReads
from nightly_assets.warehouse.reads import WarehouseReads
from nightly_assets.warehouse.writes import WarehouseWrites


class Warehouse(WarehouseWrites, WarehouseReads, PipelineReads):
    """The results warehouse. Every read and write retries transient errors (a lost connection, a
    restarting server, a deadlock) with backoff for up to `retry_s`, so a database restart during a
    night delays its stages instead of failing them."""

    def __repr__(self) -> str:
        return f"Warehouse({self._url!r})"
