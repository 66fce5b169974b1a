"""The Dagster instance a `nightly` command runs on, and `nightly init`, which sets up this host:
the instance config and pool limits, and in local mode the wheelhouse offline builds take their
backends and test tools from."""

from __future__ import annotations

import os
from importlib import resources as package_files
from pathlib import Path
from typing import TYPE_CHECKING

from nightly_assets.cli.usage import SettingsError

if TYPE_CHECKING:
    import dagster as dg

    from nightly_assets.catalog.models import Catalog

# The instance config `nightly init` writes into DAGSTER_HOME, shipped in the package (the repo root's
# dagster.yaml links to it): an install from the wheel has it without the repository.
PACKAGED_DAGSTER_YAML = package_files.files("nightly_assets") / "instance" / "dagster.yaml"


def instance(catalog: Catalog) -> dg.DagsterInstance:
    """The instance under DAGSTER_HOME (default ./.dagster_home), with the packaged dagster.yaml and pools."""
    import dagster as dg

    write_instance_config()
    inst = dg.DagsterInstance.get()
    storage = inst.event_log_storage
    # One read; a write (a transaction each) only for a pool whose limit the catalog changed.
    limits = {p.name: p.limit for p in storage.get_pool_limits() if not p.from_default}
    for pool, limit in catalog.pools.items():
        if limits.get(pool) != limit:
            storage.set_concurrency_slots(pool, limit)
    return inst


def write_instance_config() -> tuple[Path, bool]:
    """DAGSTER_HOME/dagster.yaml (DAGSTER_HOME defaults to ./.dagster_home) from the packaged file,
    where there is none yet; an operator's file (or link) is never overwritten. Returns the path and
    whether it was written."""
    home = Path(os.environ.setdefault("DAGSTER_HOME", str(Path.cwd() / ".dagster_home")))
    home.mkdir(parents=True, exist_ok=True)
    config = home / "dagster.yaml"
    if config.exists() or config.is_symlink():  # a dangling link is the operator's to fix, not ours
        return config, False
    config.write_bytes(PACKAGED_DAGSTER_YAML.read_bytes())
    return config, True


def init(catalog: Catalog) -> int:
    """Set up this host: the instance config and pool limits, and in local mode the wheelhouse offline
    builds take their backends and test tools from. Says what it wrote and what it kept."""
    from nightly_assets.builds.resources import INDEX_URL_VAR, WHEELHOUSE_VAR
    from nightly_assets.builds.toolchain import MissingToolError
    from nightly_assets.builds.wheelhouse import WheelhouseError, ensure_wheelhouse, home_wheelhouse
    from nightly_assets.resources import local_package_sources
    from nightly_assets.settings import nightly_env, nightly_home

    config, written = write_instance_config()
    print(
        f"{config}: written from the packaged instance config"
        if written
        else f"{config}: already there, kept as it is"
    )
    instance(catalog)
    print(
        f"DAGSTER_HOME={os.environ['DAGSTER_HOME']}: pools "
        + ", ".join(f"{pool}={limit}" for pool, limit in sorted(catalog.pools.items()))
    )
    if nightly_env() != "local":
        print(f"no wheelhouse made: prod takes its packages from {INDEX_URL_VAR} and {WHEELHOUSE_VAR} only")
        return 0
    try:
        made = ensure_wheelhouse(home_wheelhouse(nightly_home()))
    except (WheelhouseError, MissingToolError) as exc:
        raise SettingsError(f"wheelhouse {home_wheelhouse(nightly_home())}: {exc}") from None
    if made.made:
        print(f"{made.folder}: made from this environment: {', '.join(made.wheels)}")
    else:
        print(f"{made.folder}: already there, kept as it is ({len(made.wheels)} wheels)")
    for name in made.missing:
        print(
            f"{made.folder}: no {name} (not installed here): projects whose build-system requires it "
            f"need {INDEX_URL_VAR} or {WHEELHOUSE_VAR}, or install {name} here, remove the folder and "
            "run init again"
        )
    print(f"local builds take their packages from {local_package_sources(nightly_home())}")
    return 0
