"""The nightly results warehouse (SQLite or MySQL/MariaDB through SQLAlchemy)."""

from nightly_assets.warehouse.resources import WarehouseResource, default_warehouse_url
from nightly_assets.warehouse.store import (
    MachineCost,
    NightOverview,
    NightRow,
    PassRate,
    StageRow,
    TestRun,
    Warehouse,
    WarehouseError,
)

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
