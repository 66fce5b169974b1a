"""Every link a summary or an alert gives resolves within the retention window: nights replayed
as the docs' demo shows them (a failed night, later nights that pass, a backfill of an old
night), then every link fetched from `nightly serve`, as a person clicks them the next morning."""

from __future__ import annotations

import datetime as dt
import json
import re
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from nightly_assets_tests.test_artefact_links import artefact_server  # noqa: F401 - the fixture
from nightly_assets_tests.test_demo_night import Night, key, nights  # noqa: F401 - the fixture

pytestmark = pytest.mark.slow
LINK = re.compile(r"https?://[^\s)\]|`'\"]+")
# Seven days of retention, as the demo pipeline keeps: 11-07 failed and 11-19 passed; 11-07 is
# older than 11-19 - 7 days, which is what used to prune it the moment 11-19 ran. 11-05 is then
# backfilled, and 11-20 runs the next night.
NIGHTS = ("2026-11-07", "2026-11-19", "2026-11-05", "2026-11-20")


def links_of(text: str) -> list[str]:
    return sorted(set(LINK.findall(text)))


def status_of(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:  # noqa: S310 - the links under test
            response.read()
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return exc.code


def summary_links(nights: Night, night: str) -> list[str]:  # noqa: F811
    summary = nights.home / f"artefacts/demo/{night}/cpu/night_summary/summary.md"
    return links_of(summary.read_text())


def test_every_link_of_the_summaries_and_alerts_resolves_after_later_nights_and_a_backfill(
    artefact_server: str,  # noqa: F811 - first: the nights' resources read the URL it sets
    nights: Night,  # noqa: F811
) -> None:
    outcomes = {night: nights.run(night) for night in NIGHTS}
    assert [o.succeeded for o in outcomes.values()] == [False, True, True, True]
    artefacts = nights.home / "artefacts/demo"
    assert sorted(p.name for p in artefacts.iterdir()) == sorted(NIGHTS)  # nothing pruned
    # The backfilled night's summary ran before 11-20's: 11-20 keeps its fresh artefacts.
    assert (artefacts / "2026-11-05/cpu/tests_unit/junit.xml").is_file()

    links = {night: summary_links(nights, night) for night in NIGHTS}
    for night, found in links.items():
        assert any(link.endswith(f"/demo/{night}/cpu/tests_unit/") for link in found), night
    alerts = nights.alerts()
    assert [a["partition"] for a in alerts if a["severity"] == "error"] == ["2026-11-07|cpu"]
    alert_links = links_of(json.dumps(alerts))
    every = sorted({*alert_links, *(link for found in links.values() for link in found)})
    assert all(link.startswith(artefact_server) for link in every)
    broken = {link: code for link in every if (code := status_of(link)) != 200}
    assert broken == {}
    failed_log = f"{artefact_server}/demo/2026-11-07/cpu/tests_unit/pytest.log"
    assert status_of(failed_log) == 200 and status_of(failed_log.replace("pytest.log", "junit.xml")) == 200


def test_retention_still_prunes_what_was_written_before_the_window(
    artefact_server: str,  # noqa: F811 - first: the nights' resources read the URL it sets
    nights: Night,  # noqa: F811
) -> None:
    """The same nights, the older ones written eight days ago: 11-05 and 11-19 go (11-19 passed
    after 11-07 failed, so 11-07 goes too); the last night's links all resolve."""
    import os

    for night in NIGHTS[:3]:
        nights.run(night)
    old = (dt.datetime.now(dt.UTC) - dt.timedelta(days=8)).timestamp()
    artefacts = nights.home / "artefacts/demo"
    for night in NIGHTS[:3]:
        target = artefacts / night / "cpu"
        for path in [target, *target.iterdir(), *target.glob(f"*/{'manifest.json'}")]:
            os.utime(path, (old, old))
    last = nights.run(NIGHTS[3])
    assert last.succeeded
    assert sorted(p.name for p in artefacts.iterdir()) == [NIGHTS[3]]
    for link in summary_links(nights, NIGHTS[3]):
        assert status_of(link) == 200, link
    assert Path(artefacts / NIGHTS[3] / "cpu/night_summary/summary.md").is_file()
    assert nights.store.suite_counts(key("2026-11-07"))["tests_unit"]["failed"] == 1  # rows stay
