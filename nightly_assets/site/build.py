"""A pipeline's results site written into the artefact store (``<root>/<pipeline>/site/``): the
pages, their stylesheet, and the night results as JSON (``results_json.py``). Each file is written
whole and renamed into place, so a reader never sees half a page; a night rebuilds the pages, the
test pages it changed and only its own JSON file."""

from __future__ import annotations

import datetime as dt
import logging
import os
import tempfile
import time
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from nightly_assets.catalog.models import Pipeline
from nightly_assets.results import NightKey
from nightly_assets.site import results_json
from nightly_assets.site.data import HEALTH_NIGHTS, SiteData, read_site_data
from nightly_assets.site.pages import FolderUrl, Page, SiteRenderer, history_page_path
from nightly_assets.site.redaction import (
    PublicSiteError,
    Redactor,
    check_public_links,
    redact_all,
    remaining,
    secret_values,
)
from nightly_assets.warehouse.store import Warehouse

SITE_FOLDER = "site"
# Test pages beyond these many (the most failing first) would make one night's update slower than
# the nights they describe; the health page still lists every failed test.
MAX_TEST_PAGES = 300


@dataclass
class SiteBuild:
    folder: Path
    written: list[str] = field(default_factory=list)  # paths relative to the folder
    seconds: float = 0.0

    @property
    def index(self) -> Path:
        return self.folder / "index.html"


def site_folder(artefact_root: Path, pipeline: str) -> Path:
    return artefact_root / pipeline / SITE_FOLDER


def build_site(
    pipeline: Pipeline,
    store: Warehouse,
    artefact_root: Path,
    folder_url: FolderUrl,
    *,
    night: NightKey | None = None,
    now: dt.datetime | None = None,
    log: logging.Logger | None = None,
) -> SiteBuild:
    """Write the pipeline's pages; the JSON of `night` (or of every night shown when None). Every
    file is rendered and redacted before the first is written: a public site that cannot be
    published as asked raises `PublicSiteError` and leaves the published one as it was."""
    started = time.monotonic()
    if pipeline.public:
        check_public_links(folder_url(NightKey(pipeline.name, dt.date(2000, 1, 1), "target"), "stage"))
    data = read_site_data(pipeline, store, now=now)
    renderer = SiteRenderer(data, folder_url, public=pipeline.public)
    # Every flaky or broken test gets its page; failed tests the most failing first, up to the cap.
    judged = sorted({(v.suite, v.test_id) for verdicts in data.verdicts.values() for v in verdicts})
    judged_set = set(judged)
    failed = [(f.suite, f.test_id) for f in data.failed_tests if (f.suite, f.test_id) not in judged_set]
    paged = judged + failed[: max(0, MAX_TEST_PAGES - len(judged))]
    pages: list[Page] = [
        renderer.grid(),
        renderer.health(set(paged)),
        renderer.perf(),
        renderer.cost(),
        renderer.alerts(),
    ]
    # A test's page covers the window its verdict and the health page's failures are judged over
    # (the test_health stage's 30 nights), not the grid's two months: half the rows at scale.
    judged_nights = sorted({o.night.night for o in data.nights}, reverse=True)[:HEALTH_NIGHTS]
    history_since = judged_nights[-1] if judged_nights else dt.date.max
    window = len(judged_nights)
    rewritten = _histories_to_write(pipeline, store, data, paged, night, artefact_root)
    histories = store.test_histories_of(pipeline.name, rewritten, since=history_since)
    as_of = data.nights[0].night.night if data.nights else None
    for suite, test_id in rewritten:
        pages.append(renderer.history_page(suite, test_id, histories[(suite, test_id)], window, as_of))
    files = {page.path: page.html for page in pages}
    files["site.css"] = resources.files("nightly_assets.site").joinpath("templates/site.css").read_text()
    keys = [night] if night is not None else [o.night.key for o in data.nights]
    for key in keys:
        overview = next((o for o in data.nights if o.night.key == key), None)
        if overview is not None:
            document = results_json.night_document(overview, data, store, folder_url)
            files[results_json.night_path(key)] = results_json.dumps(document)
    files[results_json.INDEX] = results_json.dumps(results_json.index_document(data))
    redactor = Redactor(secret_values(), public=pipeline.public)
    files, taken = redact_all(redactor, files)
    if taken and log is not None:
        log.warning(
            "results site of %s: taken out before writing: %s",
            pipeline.name,
            "; ".join(sorted({f"{f.kind} ({f.path})" for f in taken})),
        )
    left = remaining(redactor, files.items())
    if left:  # a redaction that uncovers another: refuse rather than publish it
        raise PublicSiteError(
            f"results site of {pipeline.name}: still holds {', '.join(f.kind for f in left)}"
        )
    build = SiteBuild(site_folder(artefact_root, pipeline.name))
    for relative, text in files.items():
        _write(build, relative, text)
    build.seconds = time.monotonic() - started
    return build


def _histories_to_write(
    pipeline: Pipeline,
    store: Warehouse,
    data: SiteData,
    paged: list[tuple[str, str]],
    night: NightKey | None,
    artefact_root: Path,
) -> list[tuple[str, str]]:
    """The test pages a build writes: all of them on a full build; after one night, those the
    night changed (the tests that failed on it or on the target's night before, so a fix shows;
    the tests it judged) and those without a page yet. A steady test's page is left as written:
    the 300 pages' histories are most of a night's update at scale."""
    folder = site_folder(artefact_root, pipeline.name)
    if night is None or not (folder / "index.html").is_file():
        return paged
    target_nights = [o.night.night for o in data.nights if o.night.target == night.target]  # newest first
    nights = [night.night, *[n for n in target_nights if n < night.night][:1]]
    failed = {(f.suite, f.test_id) for f in store.failed_tests(pipeline.name, [night.target], nights)}
    judged = (
        {(v.suite, v.test_id) for v in data.verdicts.get(night.target, [])}
        if data.verdict_nights.get(night.target) == night.night
        else set()
    )
    return [
        test
        for test in paged
        if test in failed or test in judged or not (folder / history_page_path(*test)).is_file()
    ]


def _write(build: SiteBuild, relative: str, text: str) -> None:
    path = build.folder / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=".", suffix=".part")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(text)
        os.chmod(temporary, 0o644)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    build.written.append(relative)
