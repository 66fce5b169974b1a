"""The nightly results warehouse (SQLite or MySQL/MariaDB through SQLAlchemy)."""

from nightly_assets.warehouse.history import PassRate, TestRun
from nightly_assets.warehouse.resources import WarehouseResource, default_warehouse_url
from nightly_assets.warehouse.rows import MachineCost, NightOverview, NightRow, StageRow
from nightly_assets.warehouse.store import Warehouse, WarehouseError

__all__ = [
    "MachineCost",
    "NightOverview",
    "NightRow",
    "PassRate",
    "StageRow",
    "TestRun",
    "Warehouse",
    "WarehouseError",
    "WarehouseResource",
    "default_warehouse_url",
]
