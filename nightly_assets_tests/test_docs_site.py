"""The docs site (docs/, mkdocs.yml): its generated tables list every field, stage kind and setting
the code has, and the site as a person opens it (built strictly, served, every page opened in
Chromium) has every internal link answering 200 with its anchor on the page, and no serious or
critical axe-core violation."""

from __future__ import annotations

import functools
import http.server
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urldefrag, urlparse

import pytest

from docs.hooks import reference_tables
from nightly_assets_tests.test_results_site_browser import _assert_accessible
from nightly_assets_tests.test_retention_browser import browser_page

ROOT = Path(__file__).resolve().parents[1]


def _section(markdown: str, heading: str) -> str:
    """The text under `heading` up to the next heading of its level or above."""
    level = heading.split(" ", 1)[0]
    after = markdown.split(f"\n{heading}\n", 1)[1]
    ends = [after.find(f"\n{'#' * n} ") for n in range(1, len(level) + 1)]
    return after[: min([e for e in ends if e >= 0], default=len(after))]


def test_the_pipeline_document_lists_every_field_of_every_catalog_model() -> None:
    from nightly_assets.catalog.models import Pipeline, Runner, Stage, Suite, Target, Thresholds

    page = "\n" + reference_tables.catalog()
    models = reference_tables.reachable_models(Pipeline, Runner)
    assert {Pipeline, Target, Stage, Suite, Thresholds, Runner} <= set(models)
    for model in models:
        section = _section(page, f"### {model.__name__}")
        for name in model.model_fields:
            assert f"| `{name}` |" in section, f"{model.__name__}.{name} is not in docs/catalog.md"


def test_the_stage_kinds_page_lists_every_kind_and_every_params_field() -> None:
    kinds = reference_tables._kinds()
    page = "\n" + reference_tables.stage_kinds()
    assert len(kinds) >= 17
    for name, kind in kinds.items():
        section = _section(page, f"## {name}")
        for field in kind.params.model_fields:
            assert f"| `{field}` |" in section, f"{name}'s param {field} is not in docs/stage-kinds.md"
        for runner in kind.runners:
            assert f"`{runner}`" in section


def test_a_field_added_to_a_model_shows_up_without_editing_the_docs() -> None:
    from nightly_assets.catalog.suite import Suite

    class Grown(Suite):
        retries_per_shard: int = 3  # a new field's comment is its description

    table = reference_tables.fields_table(Grown)
    assert "| `retries_per_shard` | `int` | `3` | a new field's comment is its description |" in table
    assert all(f"| `{name}` |" in table for name in Suite.model_fields)


def test_the_configuration_page_lists_every_setting_the_code_reads() -> None:
    page = reference_tables.settings()
    wired = reference_tables.env_var_fields()
    assert {
        "NIGHTLY_WAREHOUSE_URL",
        "NIGHTLY_RUNNER_POOL",
        "NIGHTLY_SMTP_PASSWORD",
        "SLACK_BOT_TOKEN",
    } <= set(wired)
    for name in [*wired, *reference_tables.variables_read()]:
        assert f"| `{name}` |" in page, f"{name} is not in docs/configuration.md"
    runner_kinds = reference_tables.runner_kinds()
    for kind in ("local", "docker", "rbe", "tpu_vm", "batch", "kubernetes"):
        assert f"| `{kind}` |" in runner_kinds


def test_every_generated_table_has_its_page() -> None:
    markers = {
        m.group(1)
        for page in (ROOT / "docs").glob("*.md")
        for m in reference_tables.MARKER.finditer(page.read_text())
    }
    assert markers == set(reference_tables.GENERATORS)


# -- the site in a browser ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def docs_site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The site built as `make docs` builds it (strict), into a tmp folder, served on a free port."""
    site = tmp_path_factory.mktemp("docs") / "site"
    subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "--site-dir", str(site)],
        cwd=ROOT,
        check=True,
        timeout=300,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    handler = functools.partial(_QuietHandler, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.mark.browser
@pytest.mark.slow
@pytest.mark.xdist_group("docs_site")  # no UI daemon to share with the other browser tests
def test_every_docs_page_opens_accessible_with_every_internal_link_and_anchor_answering(
    docs_site: str,
) -> None:
    pages = sorted(p.name for p in (ROOT / "docs").glob("*.md"))
    to_open = [docs_site + "index.html"] + [docs_site + p.replace(".md", ".html") for p in pages]
    opened: set[str] = set()
    anchors: dict[str, set[str]] = {}  # page -> anchors linked to it
    ids: dict[str, set[str]] = {}  # page -> the ids on it
    with browser_page() as page:
        errors: list[tuple[str, str]] = []
        # A page's errors (opening an image, Chromium asks for a favicon the site has not got).
        page.on("console", lambda m: errors.append((page.url, m.text)) if m.type == "error" else None)
        while to_open:
            url = to_open.pop(0)
            if url in opened:
                continue
            response = page.goto(url)
            assert response is not None and response.status == 200, (url, response and response.status)
            opened.add(url)
            if not url.endswith(".html"):
                continue  # an image, a file: it answered
            _assert_accessible(page, url)
            ids[url] = set(page.locator("[id]").evaluate_all("nodes => nodes.map(n => n.id)"))
            hrefs = page.locator("a[href]").evaluate_all("links => links.map(a => a.href)")
            hrefs += page.locator("img[src]").evaluate_all("images => images.map(i => i.src)")
            for href in hrefs:
                target, fragment = urldefrag(href)
                if urlparse(target).netloc != urlparse(docs_site).netloc:
                    continue  # another site: not ours to check
                to_open.append(target)
                if fragment:
                    anchors.setdefault(target, set()).add(fragment)
    for target, names in sorted(anchors.items()):
        assert names <= ids[target], (target, sorted(names - ids[target]))
    assert [error for error in errors if error[0].endswith(".html")] == []
    assert {docs_site + p.replace(".md", ".html") for p in pages} <= opened
    assert any(url.endswith(".png") for url in opened)  # the images are linked and answer
