"""Where the embedded default keeps its state, and which resource set (local or prod) is in force."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

import dagster as dg

Env = Literal["local", "prod"]


def nightly_env() -> Env:
    """NIGHTLY_ENV picks the resource set: `local` (the default; everything on this machine) or `prod`."""
    value = os.environ.get("NIGHTLY_ENV", "local")
    if value not in ("local", "prod"):
        raise ValueError(f"NIGHTLY_ENV={value!r}: expected 'local' or 'prod'")
    return value  # type: ignore[return-value]


def nightly_home() -> Path:
    """Root of artefacts, the SQLite warehouse, git caches and alerts: NIGHTLY_HOME or ./.nightly."""
    return Path(os.environ.get("NIGHTLY_HOME", Path.cwd() / ".nightly")).resolve()


def env_var_names(config: object) -> set[str]:
    """Every variable a Dagster config reads through `{env: NAME}`: in resources (`dg.EnvVar`
    fields, nested resources included) or in an instance's YAML (mappings and lists)."""
    if isinstance(config, dg.ConfigurableResource):
        config = config._convert_to_config_dictionary()  # the config as Dagster sees it
    if isinstance(config, dict):
        if set(config) == {"env"}:
            return {str(config["env"])}
        return set().union(*(env_var_names(value) for value in config.values()))
    if isinstance(config, list):
        return set().union(*(env_var_names(value) for value in config))
    return set()
