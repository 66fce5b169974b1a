"""`nightly run` materializes one night through the Dagster instance; `nightly status` shows the nights."""

# The command line, one module per command group: this one parses it and hands each command to
# `night` (run, culprits), `queries` (status, tests, shards, site), `history` (the tests' questions),
# `shards` (a shard plan), `instance` (init); `usage` checks what was given.

from __future__ import annotations

import argparse
import gc
import os
import sys
import warnings
from typing import TYPE_CHECKING

from nightly_assets.cli import history, instance, night, queries, shards
from nightly_assets.cli.usage import INTERRUPTED, SettingsError, UsageError
from nightly_assets.shards.plan import ShardPlanError

if TYPE_CHECKING:  # the modules behind a command are imported by that command: `--help` answers at once
    from nightly_assets.catalog.models import Catalog
    from nightly_assets.catalog.outline import CatalogOutline


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="nightly", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="materialize one night of a pipeline, target by target")
    run.add_argument("pipeline")
    run.add_argument("--night", required=True, help="YYYY-MM-DD (UTC)")
    run.add_argument(
        "--target", help="one target of the pipeline's matrix, or a run slot's cell (cpu@06) (default: all)"
    )
    culprits = sub.add_parser(
        "culprits", help="bisect a night's new failures and regressions to their commit"
    )
    culprits.add_argument("pipeline")
    culprits.add_argument("--night", required=True, help="YYYY-MM-DD (UTC)")
    culprits.add_argument("--target", help="one target of the pipeline's matrix (default: all)")
    sub.add_parser(
        "init",
        help="set up DAGSTER_HOME (dagster.yaml, pool limits from the catalog) and, in local mode, "
        "$NIGHTLY_HOME/wheelhouse (offline build backends and test tools)",
    )
    status = sub.add_parser("status", help="nights x targets x stages with state and test counts")
    status.add_argument("--pipeline", help="only this pipeline")
    status.add_argument("--json", action="store_true", help="machine-readable output")
    history.add_parser(sub)
    shards.add_parser(sub)
    site = sub.add_parser(
        "site",
        help="build each pipeline's results site from the warehouse (after each night it updates itself)",
    )
    site.add_argument("--pipeline", help="only this pipeline")
    serve = sub.add_parser("serve", help="serve the artefact folders (logs, JUnit, summaries) over HTTP")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=3001)
    args = parser.parse_args(argv)
    try:
        code = _command(args, own_process=argv is None)
        sys.stdout.flush()  # here, where a reader that has gone is caught, not at exit
        if argv is None:  # the process's own command line: it exits next
            _skip_collection_at_exit()
        return code
    except BrokenPipeError:
        # The reader stopped early (`nightly status | head`): it has what it asked for. What is
        # still buffered has nowhere to go; flushing it at exit would raise again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except KeyboardInterrupt:
        print("nightly: interrupted", file=sys.stderr)
        return INTERRUPTED
    except _user_errors() as exc:  # evaluated only when something else was raised
        print(f"nightly: {exc}", file=sys.stderr)
        return 2


def _skip_collection_at_exit() -> None:
    """A run leaves Dagster's and the stages' objects behind; the garbage collector walking them
    while the interpreter shuts down costs a `nightly run` a second or more. The process is ending:
    its output is flushed, the warehouse and Dagster have committed, atexit handlers still run;
    only objects in reference cycles are left to the OS to free."""
    gc.disable()
    gc.freeze()


def _user_errors() -> tuple[type[Exception], ...]:
    """The errors that are the user's to fix: one line and exit 2, no traceback."""
    from nightly_assets.catalog.loader import CatalogError
    from nightly_assets.warehouse.access import WarehouseError

    return (CatalogError, UsageError, WarehouseError, SettingsError, history.TargetError, ShardPlanError)


def _command(args: argparse.Namespace, own_process: bool = False) -> int:
    """Run the parsed command; its exit status. `own_process`: the command is this process's own
    command line (not a call from Python), so it may tune the process's garbage collection."""
    if args.command == "shards" and args.durations is not None:  # a file: no catalog, no warehouse
        return queries.shards_of_file(args)
    if args.command in ("status", "tests", "shards"):  # questions to the warehouse: no dagster, no resources
        outline = _catalog_outline()
        if args.command == "tests":
            return queries.tests(outline, args)
        if args.command == "shards":
            return queries.shards(outline, args)
        return queries.status(outline, args.pipeline, args.json)
    if own_process and args.command in ("run", "culprits"):
        gc.disable()  # until `night.night_begins`: what starting up makes lives as long as the process
    import dagster as dg  # the catalog's stage kinds import it anyway

    from nightly_assets.catalog.loader import load_catalog
    from nightly_assets.settings import nightly_home

    for category in (dg.BetaWarning, dg.PreviewWarning):  # notes for Dagster's developers, not ours
        warnings.filterwarnings("ignore", category=category)
    # A night needs its own pipeline alone (the others' stage kinds stay unimported).
    catalog = load_catalog(only=args.pipeline if args.command in ("run", "culprits", "site") else None)
    if args.command == "init":
        return instance.init(catalog)
    if args.command == "serve":
        from nightly_assets.artefacts.serve import serve_artefacts

        return serve_artefacts(nightly_home() / "artefacts", args.host, args.port)
    if args.command == "site":
        return queries.site(catalog)
    if args.command == "run":
        return night.run(catalog, args.pipeline, args.night, args.target)
    return night.culprits(catalog, args.pipeline, args.night, args.target)


def _catalog_outline() -> CatalogOutline | Catalog:
    """The pipelines' names, titles, targets and stages, read plainly; the validated catalog where
    the plain read cannot tell (it then says what is wrong)."""
    from nightly_assets.catalog.outline import load_outline

    outline = load_outline()
    if outline is not None:
        return outline
    from nightly_assets.catalog.loader import load_catalog

    return load_catalog()
