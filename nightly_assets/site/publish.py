"""The results site updated where people read it: built into the artefact store's folder and
published with it (a bucket uploads the files written), after a night's summary and from
`nightly site`. A site that cannot be built never fails the night it describes."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

from nightly_assets.artefacts.resources import ArtefactStoreResource
from nightly_assets.catalog.models import Pipeline
from nightly_assets.results import NightKey
from nightly_assets.site.build import SiteBuild, build_site
from nightly_assets.warehouse.store import Warehouse


def update_site(
    pipeline: Pipeline,
    store: Warehouse,
    artefacts: ArtefactStoreResource,
    *,
    night: NightKey | None = None,
    log: logging.Logger | None = None,
) -> tuple[SiteBuild, str]:
    """Build the pipeline's site (the JSON of `night` only, when given) and publish it; the build
    and the link to its nights page."""
    build = build_site(pipeline, store, Path(artefacts.root), artefacts.folder_url, night=night, log=log)
    links = artefacts.publish_files(build.folder, [build.folder / name for name in build.written])
    return build, links["index.html"]


def update_site_after_night(
    pipeline: Pipeline, store: Warehouse, artefacts: ArtefactStoreResource, key: NightKey, log: logging.Logger
) -> str | None:
    """`update_site` for the night just summarized; a failure is logged, never raised: the night's
    own record stands whatever happens to the pages about it."""
    try:
        build, link = update_site(pipeline, store, artefacts, night=key, log=log)
    except Exception as exc:  # the pages are derived; the next night rebuilds them
        log.warning("results site of %s not updated: %s: %s", pipeline.name, type(exc).__name__, exc)
        return None
    log.info(
        "results site of %s updated (%d files in %.1f s): %s",
        pipeline.name,
        len(build.written),
        build.seconds,
        link,
    )
    return link


def update_sites(
    pipelines: Sequence[Pipeline], store: Warehouse, artefacts: ArtefactStoreResource, log: logging.Logger
) -> None:
    """The sites of `pipelines` rebuilt (their alerts page gained an alert); failures logged."""
    for pipeline in pipelines:
        try:
            update_site(pipeline, store, artefacts, log=log)
        except Exception as exc:  # the alert went out and is kept; its page catches up next time
            log.warning("results site of %s not updated: %s: %s", pipeline.name, type(exc).__name__, exc)
