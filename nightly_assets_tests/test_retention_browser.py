"""In a browser, as a person opens them: every artefact link of a failed night and of a backfilled
night, after a later night has run, opens (folder listings and each file in them)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest

from nightly_assets_tests.test_artefact_links import artefact_server  # noqa: F401 - the fixture
from nightly_assets_tests.test_demo_night import Night, nights  # noqa: F401 - the fixture
from nightly_assets_tests.test_retention_links import summary_links
from nightly_assets_tests.test_ui import CHROMIUM, CHROMIUM_ARGS

# its own worker: it shares no UI daemon with the other browser tests (the browser group is the
# suite's critical path)
pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.xdist_group("retention_browser")]
FAILED, LATER, BACKFILLED = "2026-11-07", "2026-11-19", "2026-11-05"


@contextlib.contextmanager
def browser_page() -> Iterator[Any]:
    """Chromium started after the nights ran: Playwright's event loop beside an in-process run
    leaves Dagster's own loop unawaited."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = chromium.new_page()
        page.set_default_timeout(15_000)
        yield page
        chromium.close()


def click_through(page: Any, url: str) -> list[str]:
    """Open `url`; on a folder listing, click each of its links (its files and sub-folders, not
    what the sub-folders hold: a stage's work folders hold whole checkouts and virtualenvs),
    coming back each time. Returns every page opened, each one checked to have opened."""
    response = page.goto(url)
    assert response is not None and response.ok, (url, response and response.status)
    opened = [url]
    if not url.endswith("/"):
        return opened
    names = page.locator("li a").evaluate_all("links => links.map(a => a.getAttribute('href'))")
    for name in names:
        page.click(f"li a[href='{name}']")
        page.wait_for_load_state()
        assert page.url == url + name
        status = page.evaluate("() => performance.getEntriesByType('navigation')[0].responseStatus")
        assert status == 200, (page.url, status)
        opened.append(page.url)
        page.goto(url)
    return opened


def test_every_artefact_link_of_a_failed_and_a_backfilled_night_opens_in_the_browser(
    artefact_server: str,  # noqa: F811 - first: the nights' resources read the URL it sets
    nights: Night,  # noqa: F811
) -> None:
    assert not nights.run(FAILED).succeeded
    assert nights.run(LATER).succeeded  # more than 7 days after the failed night
    assert nights.run(BACKFILLED).succeeded  # an old night, backfilled after it
    opened: list[str] = []
    with browser_page() as page:
        for night in (FAILED, BACKFILLED):
            links = summary_links(nights, night)
            assert len(links) >= 10, links  # a folder per stage that ran
            for link in links:
                opened += click_through(page, link)
    assert f"{artefact_server}/demo/{FAILED}/cpu/tests_unit/pytest.log" in opened
    assert f"{artefact_server}/demo/{FAILED}/cpu/tests_unit/junit.xml" in opened
    assert f"{artefact_server}/demo/{BACKFILLED}/cpu/tests_unit/junit.xml" in opened
