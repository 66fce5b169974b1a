"""The results site as a person opens it: demo nights (one failing) run with the site on, served by
`nightly serve`, every page opened in Chromium with no console error and no serious or critical
axe-core violation, and every link of every page answering 200."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urldefrag

import pytest

from nightly_assets_tests.test_artefact_links import artefact_server  # noqa: F401 - the fixture
from nightly_assets_tests.test_demo_night import Night, nights  # noqa: F401 - the fixture
from nightly_assets_tests.test_retention_browser import browser_page

# its own worker: it shares no UI daemon with the other browser tests (the browser group is the
# suite's critical path)
pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.xdist_group("results_site_browser")]
GOOD, FAILED = "2026-11-03", "2026-11-07"  # 11-07's commit breaks test_mean
PAGES = ("index.html", "health.html", "perf.html", "cost.html", "alerts.html")
SERIOUS = ("serious", "critical")


@pytest.fixture
def site_on(monkeypatch: pytest.MonkeyPatch, nightly_home: Path) -> Iterator[None]:
    """The site rebuilt after each night, as outside the tests (conftest turns it off)."""
    monkeypatch.setenv("NIGHTLY_RESULTS_SITE", "1")
    yield


def test_the_site_after_a_good_and_a_failed_night_opens_accessible_with_every_link_answering(
    artefact_server: str,  # noqa: F811 - first: the nights' resources read the URL it sets
    site_on: None,
    nights: Night,  # noqa: F811
) -> None:
    assert nights.run(GOOD).succeeded
    assert not nights.run(FAILED).succeeded
    site = f"{artefact_server}/demo/site/"
    with browser_page() as page:
        errors: list[tuple[str, str]] = []  # (page, message)
        page.on("console", lambda m: errors.append((page.url, m.text)) if m.type == "error" else None)
        links: set[str] = set()
        # `nightly serve`'s root lists the pipelines' sites: a person starts there.
        page.goto(artefact_server + "/")
        _assert_accessible(page, "the artefact root")
        page.click("a[href='demo/site/index.html']")
        assert page.url == site + "index.html"
        for name in PAGES:
            response = page.goto(site + name)
            assert response is not None and response.ok, name
            _assert_accessible(page, name)
            links |= _links(page)
        # The failed night is red in the grid, and its tests_unit cell opens the folder with its log.
        page.goto(site + "index.html")
        row = page.locator("tr", has=page.locator(f"th >> text={FAILED}"))
        assert row.locator("td.s-failure").first.inner_text().startswith("failure")
        cell = row.locator(f"a[href$='/demo/{FAILED}/cpu/tests_unit/']")
        assert "failure" in cell.inner_text() and "passed" in cell.inner_text()
        cell.click()
        page.wait_for_load_state()
        assert page.locator("a[href='pytest.log']").count() == 1
        page.click("a[href='pytest.log']")
        assert "test_mean" in page.content()
        # The failing test's own page, from test health.
        page.goto(site + "health.html")
        page.get_by_role(
            "link", name="tests.test_reduce::test_mean"
        ).first.click()  # not the signature table's text
        # test_mean came with the sample's 0.2.0 (11-06): one night of history, failed.
        assert page.locator("td.s-failed").count() == 1
        assert page.locator("tbody tr").first.locator("td").first.inner_text() == FAILED
        _assert_accessible(page, "the test's page")
        links |= _links(page)
        # The site's own pages (the artefact server's listings are Python's, favicon 404s and all).
        assert [error for error in errors if "/demo/site/" in error[0]] == []
    opened = {link: _status(link) for link in sorted(links)}
    assert [link for link, status in opened.items() if status != 200] == []
    assert any(link.endswith("/results/index.json") for link in opened)
    assert sum(1 for link in opened if "/cpu/" in link) >= 10  # the stages' evidence


def _assert_accessible(page: Any, name: str) -> None:
    from axe_playwright_python.sync_playwright import Axe

    violations = Axe().run(page).response["violations"]
    bad = [(v["id"], v["impact"], len(v["nodes"])) for v in violations if v["impact"] in SERIOUS]
    assert bad == [], (name, bad)


def _links(page: Any) -> set[str]:
    hrefs = page.locator("a[href]").evaluate_all("links => links.map(a => a.href)")
    return {urldefrag(href).url for href in hrefs if href.startswith("http")}


def _status(url: str) -> int:
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=10) as response:  # noqa: S310 - the local server
            return int(response.status)
    except urllib.error.HTTPError as error:
        return error.code
