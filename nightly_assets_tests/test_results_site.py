"""The results site built from a warehouse: a month of nights of a pipeline written row by row as
nights write them (a failed night, a flaky and a broken test, a benchmark that steps up on one
night and moves to a new card on another, TPU costs, alerts), then each page and the JSON read
back as a person and a HUD would."""

from __future__ import annotations

import datetime as dt
import json
import secrets
import sys
from collections.abc import Iterator
from pathlib import Path

import defusedxml.ElementTree as defused
import pytest

from nightly_assets.artefacts.gcs import GcsArtefactStoreResource
from nightly_assets.catalog.loader import load_catalog
from nightly_assets.catalog.models import Pipeline
from nightly_assets.devices.facts import DeviceFacts
from nightly_assets.results import BenchmarkResult, NightKey, TestCase, TestReport
from nightly_assets.site.build import build_site
from nightly_assets.site.pages import SCHEMA, history_page_path
from nightly_assets.site.publish import update_site
from nightly_assets.site.redaction import PublicSiteError
from nightly_assets.warehouse.rows import MachineCost, Regression, SentAlert, TestVerdict
from nightly_assets.warehouse.store import Warehouse
from nightly_assets.warehouse.tables import node_key
from nightly_assets_tests.peers.gcs import GcsEmulator

FIRST = dt.date(2026, 10, 1)
NIGHTS = 30
FAILED_NIGHT = dt.date(2026, 10, 20)  # test_mean broken from here on
STEP_NIGHT = dt.date(2026, 10, 12)  # matmul 1.0 s -> 1.5 s
NEW_CARD_NIGHT = dt.date(2026, 10, 25)  # H100 -> H200
BASE = "http://artefacts.example:3001"
SVG = "{http://www.w3.org/2000/svg}"


def folder_url(key: NightKey, stage: str) -> str:
    return f"{BASE}/{key.pipeline}/{key.night}/{key.target}/{stage}/"


@pytest.fixture(scope="module")
def demo() -> Pipeline:
    return load_catalog(only="demo").pipelines["demo"]


@pytest.fixture(scope="module")
def site(demo: Pipeline, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _built_site(demo, tmp_path_factory.mktemp("site"))


def _built_site(demo: Pipeline, root: Path) -> Path:
    """The demo's site built under `root` from a month of synthetic nights; its folder."""
    store = Warehouse(f"sqlite:///{root}/warehouse.sqlite")
    try:
        _fill(store, demo)
        build_site(demo, store, root / "artefacts", folder_url, now=dt.datetime(2026, 10, 31, 6))
    finally:
        store.dispose()
    return root / "artefacts" / "demo" / "site"


def _fill(store: Warehouse, demo: Pipeline) -> None:
    h100 = DeviceFacts(vendor="nvidia", model="NVIDIA H100", count=1, memory_mib=81559, driver="580.1")
    h200 = DeviceFacts(vendor="nvidia", model="NVIDIA H200", count=1, memory_mib=143771, driver="580.1")
    for offset in range(NIGHTS):
        night = FIRST + dt.timedelta(days=offset)
        key = NightKey("demo", night, "cpu")
        run_id = f"run-{offset:02d}"
        broken = night >= FAILED_NIGHT
        flaky_fails = offset % 4 == 1
        cases = (
            TestCase(
                "tests.test_reduce",
                "test_mean",
                "failed" if broken else "passed",
                0.01,
                "assert 4.0 == 3.0" if broken else None,
            ),
            TestCase(
                "tests.test_io",
                "test_read",
                "failed" if flaky_fails else "passed",
                0.02,
                "timeout <script>" if flaky_fails else None,
            ),
            TestCase("tests.test_io", "test_write", "passed", 0.02),
        )
        failed = broken or flaky_fails
        for stage in demo.stages:
            status = "failure" if stage.name == "tests_unit" and failed else "success"
            store.record_stage(
                key, stage.name, status=status, runner="local", duration_s=30.0 + offset, run_id=run_id
            )
        store.record_test_report(key, TestReport("tests_unit", cases), run_id=run_id)
        devices = h200 if night >= NEW_CARD_NIGHT else h100
        value = (1.5 if night >= STEP_NIGHT else 1.0) + 0.01 * (offset % 3)
        store.record_benchmarks(key, [BenchmarkResult("matmul_64", value)], devices=devices)
        store.record_device_facts(key, "benchmarks", "local", devices)
        store.record_cost(key, MachineCost("tests_tpu", "nodes/n1", "v6e-1", 1800.0, 0.64, 0.32, "completed"))
        store.record_night(
            key, run_id=run_id, status="failure" if failed else "success", pins={"sample": f"{offset:040x}"}
        )
    last = NightKey("demo", FIRST + dt.timedelta(days=NIGHTS - 1), "cpu")
    store.record_verdicts(
        last,
        [
            TestVerdict(
                "tests_unit",
                node_key("tests.test_reduce::test_mean"),
                "tests.test_reduce::test_mean",
                "broken",
                "failed 11 nights in a row",
                0.0,
                False,
                False,
                FAILED_NIGHT,
                FAILED_NIGHT - dt.timedelta(days=1),
                {"sample": {"good": "a" * 40, "bad": "b" * 40, "commits": []}},
            ),
            TestVerdict(
                "tests_unit",
                node_key("tests.test_io::test_read"),
                "tests.test_io::test_read",
                "flaky",
                "passed on re-run",
                0.75,
                True,
                False,
                None,
                None,
                {},
            ),
        ],
    )
    store.record_regressions(
        NightKey("demo", STEP_NIGHT, "cpu"),
        [
            Regression(
                "demo",
                STEP_NIGHT,
                "cpu",
                "matmul_64",
                STEP_NIGHT,
                STEP_NIGHT - dt.timedelta(days=1),
                1.0,
                1.5,
                "s",
                True,
                {},
            )
        ],
    )
    sent = dt.datetime(2026, 10, 20, 7, 5)
    store.record_alert(
        NightKey("demo", FAILED_NIGHT, "cpu"),
        SentAlert("run-19", "error", "demo 2026-10-20 failed", "tests_unit: 1 failed <b>", "#nightly", sent),
    )


def test_the_nights_grid_shows_each_night_newest_first_with_failed_cells_linked_to_their_evidence(
    site: Path,
) -> None:
    html = (site / "index.html").read_text()
    nights = [FIRST + dt.timedelta(days=n) for n in range(NIGHTS)]
    positions = [html.index(f">{night.isoformat()}</a>") for night in reversed(nights)]
    assert positions == sorted(positions), "newest night first"
    failed_cell = f'<td class="s-failure"><a href="{BASE}/demo/{FAILED_NIGHT}/cpu/tests_unit/"'
    assert failed_cell in html
    assert "2/3 passed" in html
    assert "1 broken test, 1 flaky test" in html  # the verdicts' night carries the marks
    assert "1x NVIDIA H200" in html  # the device configuration of the night


def test_test_health_names_broken_and_flaky_tests_with_pages_of_their_history(site: Path) -> None:
    html = (site / "health.html").read_text()
    assert "tests.test_reduce::test_mean" in html and f"<td>{FAILED_NIGHT}</td>" in html
    assert "75% passed" in html  # the flaky test's pass rate
    assert "33.3% of 3 tests" in html and "(over the limit)" in html  # 1 flaky of 3 > 5 %
    page = site / history_page_path("tests_unit", "tests.test_reduce::test_mean")
    history = page.read_text()
    assert history.count('class="s-failed"') == 11 and history.count('class="s-passed"') == 19
    assert (
        "timeout &lt;script&gt;"
        in (site / history_page_path("tests_unit", "tests.test_io::test_read")).read_text()
    )


def test_the_trend_chart_marks_the_step_and_the_new_card_and_titles_every_point(site: Path) -> None:
    html = (site / "perf.html").read_text()
    svg_text = html[html.index("<svg") : html.index("</svg>") + len("</svg>")]
    svg = defused.fromstring(svg_text)
    assert svg.get("role") == "img" and svg.get("aria-label") == "matmul_64 on cpu"
    titles = [t.text or "" for t in svg.iter(f"{SVG}title")]
    assert len(titles) == 1 + NIGHTS  # the chart's own, then one per point
    assert titles[1].startswith("2026-10-01: 1 s (sample@0000000000)")
    assert f"{STEP_NIGHT}: worse, 1 → 1.5 s (last good {STEP_NIGHT - dt.timedelta(days=1)})" in html
    assert "1 confirmed change, 1 configuration change" in html
    assert "<script" not in html


def test_without_matplotlib_the_performance_page_shows_the_values_and_says_why_no_chart(
    demo: Pipeline, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As on the H200 host, whose trimmed install left matplotlib out: the site is still built,
    each benchmark's values as an open table, and the page says why there is no chart."""
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` raises ImportError
    html = (_built_site(demo, tmp_path) / "perf.html").read_text()
    assert "<svg" not in html
    assert "No chart: matplotlib is not installed beside nightly_assets" in html
    assert "<details open><summary>The values as a table</summary>" in html
    assert html.count("<tr><td><a href=") == NIGHTS  # every night's value


def test_costs_add_up_by_month_against_the_per_run_budget(site: Path) -> None:
    html = (site / "cost.html").read_text()
    assert "<td>2026-10</td><td>15.00</td><td>9.60</td><td>30</td>" in html  # 30 x 0.5 h, 30 x 0.32 USD


def test_alerts_are_listed_escaped_with_their_night(site: Path) -> None:
    html = (site / "alerts.html").read_text()
    assert "demo 2026-10-20 failed" in html and "tests_unit: 1 failed &lt;b&gt;" in html
    assert f'href="{BASE}/demo/{FAILED_NIGHT}/cpu/night_summary/summary.md"' in html


def test_the_results_json_is_the_documented_schema(site: Path) -> None:
    index = json.loads((site / "results" / "index.json").read_text())
    assert index["schema"] == SCHEMA and len(index["nights"]) == NIGHTS
    newest = index["nights"][0]
    night = json.loads((site / "results" / newest["path"]).read_text())
    assert night["schema"] == SCHEMA and night["status"] == "failure" and night["night"] == newest["night"]
    assert night["suites"]["tests_unit"]["failed"] >= 1
    assert {
        "suite": "tests_unit",
        "test": "tests.test_reduce::test_mean",
        "outcome": "failed",
        "message": "assert 4.0 == 3.0",
    } in night["failed_tests"]
    assert [s["name"] for s in night["stages"]][:1] == ["sources"]


def test_every_page_links_only_to_pages_that_exist_or_to_the_artefact_store(site: Path) -> None:
    pages = sorted(site.rglob("*.html"))
    assert len(pages) == 5 + 2  # the five pages and two test pages
    for page in pages:
        html = page.read_text()
        for href in _hrefs(html):
            if href.startswith((BASE, "data:", "#")):
                continue
            assert "://" not in href, (page, href)
            assert (page.parent / href).resolve().exists(), (page.name, href)


def _hrefs(html: str) -> list[str]:
    import re

    return re.findall(r'href="([^"]+)"', html)


# -- public sites ------------------------------------------------------------------------------

PUBLIC_BASE = "https://results.example.org/artefacts"
CANARIES = {
    "SLACK_BOT_TOKEN": "xoxb-canary-5f1e0c2a9b",
    "NIGHTLY_GITHUB_TOKEN": "ghp_canaryCANARYcanary0123456789",
    "NIGHTLY_REGISTRY_ACR_PASSWORD": "canary-acr-7d3c1b",
}
LEAKY_MESSAGE = (
    "ConnectionError: mysql://nightly:hunter2hunter2@db.corp.internal:3306 refused (10.20.30.40); "
    f"token {CANARIES['SLACK_BOT_TOKEN']}; registry password {CANARIES['NIGHTLY_REGISTRY_ACR_PASSWORD']}"
)


@pytest.fixture
def leaky_store(demo: Pipeline, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Warehouse]:
    """The month of nights, and a last night whose failure and alert print secrets and hosts."""
    for name, value in CANARIES.items():
        monkeypatch.setenv(name, value)
    store = Warehouse(f"sqlite:///{tmp_path}/warehouse.sqlite")
    _fill(store, demo)
    key = NightKey("demo", FIRST + dt.timedelta(days=NIGHTS - 1), "cpu")
    leak = TestCase("tests.test_db", "test_connect", "failed", 0.1, LEAKY_MESSAGE)
    store.record_test_report(key, TestReport("tests_unit", (leak,)), run_id="run-29")
    alert = SentAlert(
        "run-29",
        "error",
        "demo failed",
        f"see {LEAKY_MESSAGE}",
        "/home/ci/alerts.jsonl",
        dt.datetime(2026, 10, 30, 7),
    )
    store.record_alert(key, alert)
    yield store
    store.dispose()


def public_url(key: NightKey, stage: str) -> str:
    return f"{PUBLIC_BASE}/{key.pipeline}/{key.night}/{key.target}/{stage}/"


def test_a_public_site_holds_no_secret_private_host_or_destination_and_links_only_its_artefacts(
    demo: Pipeline, leaky_store: Warehouse, tmp_path: Path
) -> None:
    public = demo.model_copy(update={"public": True})
    build = build_site(public, leaky_store, tmp_path / "artefacts", public_url)
    texts = {name: (build.folder / name).read_text() for name in build.written}
    everything = "\n".join(texts.values())
    for value in [
        *CANARIES.values(),
        "hunter2hunter2",
        "db.corp.internal",
        "10.20.30.40",
        "/home/ci/alerts.jsonl",
    ]:
        assert value not in everything, value
    assert "[redacted SLACK_BOT_TOKEN]" in texts["health.html"]
    assert "mysql://[redacted credentials]@[internal host]:3306 refused ([private address])" in everything
    for name, text in texts.items():
        for href in _hrefs(text):
            assert not href.startswith("http") or href.startswith(f"{PUBLIC_BASE}/demo/"), (name, href)


def test_a_private_site_still_has_its_hosts_but_never_a_secret(
    demo: Pipeline, leaky_store: Warehouse, tmp_path: Path
) -> None:
    build = build_site(demo, leaky_store, tmp_path / "artefacts", folder_url)
    everything = "\n".join((build.folder / name).read_text() for name in build.written)
    assert not any(value in everything for value in CANARIES.values())
    assert "db.corp.internal" in everything and "/home/ci/alerts.jsonl" in everything  # the team's own


def test_a_public_site_with_private_artefact_links_is_refused_naming_the_setting(
    demo: Pipeline, leaky_store: Warehouse, tmp_path: Path
) -> None:
    public = demo.model_copy(update={"public": True})
    with pytest.raises(PublicSiteError, match="NIGHTLY_ARTEFACTS_URL") as refused:
        build_site(
            public, leaky_store, tmp_path / "artefacts", lambda k, s: f"http://127.0.0.1:3001/{k}/{s}/"
        )
    assert "http://127.0.0.1:3001" in str(refused.value)
    assert not (tmp_path / "artefacts").exists()  # nothing written


@pytest.mark.gcs
def test_a_bucket_store_uploads_the_site_and_links_its_pages_in_the_bucket(
    demo: Pipeline, leaky_store: Warehouse, tmp_path: Path, gcs: GcsEmulator
) -> None:
    """In prod the pages go where the artefacts go: every file written is uploaded, as HTML and CSS."""
    from dagster_gcp import GCSResource
    from google.cloud import storage

    prefix = f"t{secrets.token_hex(3)}"  # the emulator's bucket is shared by the session's tests
    artefacts = GcsArtefactStoreResource(
        root=str(tmp_path / "artefacts"),
        gcs=GCSResource(project="nightly-test"),
        bucket=gcs.bucket,
        prefix=prefix,
    )
    build, link = update_site(demo, leaky_store, artefacts)
    blobs = {
        b.name: b for b in storage.Client(project="nightly-test").list_blobs(gcs.bucket, prefix=f"{prefix}/")
    }
    assert set(blobs) == {f"{prefix}/demo/site/{name}" for name in build.written}
    assert blobs[f"{prefix}/demo/site/index.html"].content_type.startswith(
        "text/html"
    )  # the emulator drops charset
    assert blobs[f"{prefix}/demo/site/site.css"].content_type.startswith("text/css")
    assert link.endswith(f"/{gcs.bucket}/{prefix}/demo/site/index.html")


def _failures(store: Warehouse) -> list[tuple[str, int, dt.date, str | None]]:
    """A test failing on two targets (once on both the same night), another once; what the
    health page lists of them over four nights."""
    nights = [dt.date(2026, 10, d) for d in (1, 2, 3, 4)]
    fails = {  # (target, night) -> the failing cases
        ("cpu", nights[0]): [("tests.a", "test_x", "first")],
        ("gpu", nights[0]): [("tests.a", "test_x", "gpu")],
        ("cpu", nights[2]): [("tests.a", "test_x", "newest"), ("tests.b", "test_y", "once")],
    }
    for night in nights:
        for target in ("cpu", "gpu"):
            failing = fails.get((target, night), [])
            cases = [TestCase(c, n, "failed", 0.1, m) for c, n, m in failing]
            cases.append(TestCase("tests.a", "test_ok", "passed", 0.1))
            store.record_test_report(NightKey("demo", night, target), TestReport("tests_unit", tuple(cases)))
    found = store.failed_tests("demo", ["cpu", "gpu"], nights)
    return [(f.test_id, f.count, f.last, f.last_message) for f in found]


EXPECTED_FAILURES = [
    ("tests.a::test_x", 2, dt.date(2026, 10, 3), "newest"),  # 2 nights, not 3 rows
    ("tests.b::test_y", 1, dt.date(2026, 10, 3), "once"),
]


def test_failed_tests_count_nights_across_targets_with_the_newest_message(tmp_path: Path) -> None:
    store = Warehouse(f"sqlite:///{tmp_path}/warehouse.sqlite")
    try:
        assert _failures(store) == EXPECTED_FAILURES
    finally:
        store.dispose()


@pytest.mark.mysql
def test_failed_tests_read_the_same_on_mariadb(mysql_url: str) -> None:
    store = Warehouse(mysql_url)
    try:
        assert _failures(store) == EXPECTED_FAILURES
    finally:
        store.dispose()


def test_a_nights_update_rewrites_only_the_test_pages_that_night_changed(
    demo: Pipeline, tmp_path: Path
) -> None:
    store = Warehouse(f"sqlite:///{tmp_path}/warehouse.sqlite")
    artefacts = tmp_path / "artefacts"
    try:
        _fill(store, demo)
        build_site(demo, store, artefacts, folder_url)  # the full build: every page
        built: dict[dt.date, list[str]] = {}
        for offset in (NIGHTS, NIGHTS + 1):  # two more nights: test_mean still broken, test_read passes
            night = FIRST + dt.timedelta(days=offset)
            key = NightKey("demo", night, "cpu")
            cases = (
                TestCase("tests.test_reduce", "test_mean", "failed", 0.01, "assert 4.0 == 3.0"),
                TestCase("tests.test_io", "test_read", "passed", 0.02),
                TestCase("tests.test_io", "test_write", "passed", 0.02),
            )
            store.record_test_report(key, TestReport("tests_unit", cases), run_id=f"run-{offset}")
            store.record_stage(
                key, "tests_unit", status="failure", runner="local", duration_s=1.0, run_id=f"run-{offset}"
            )
            store.record_night(key, run_id=f"run-{offset}", status="failure", pins={})
            built[night] = build_site(demo, store, artefacts, folder_url, night=key).written
    finally:
        store.dispose()
    site = artefacts / "demo" / "site"
    mean = history_page_path("tests_unit", "tests.test_reduce::test_mean")
    read = history_page_path("tests_unit", "tests.test_io::test_read")
    first, second = sorted(built)
    # The first new night follows test_read's last flaky failure: its page shows the pass.
    assert {mean, read} <= set(built[first])
    # The next one changed only the broken test's page; test_read's stays as the night before wrote it.
    assert mean in built[second] and read not in built[second]
    assert "index.html" in built[second] and "health.html" in built[second]
    mean_html, read_html = (site / mean).read_text(), (site / read).read_text()
    assert f"<td>{second}</td>" in mean_html and f"Written after the night of {second}" in mean_html
    assert f"<td>{second}</td>" not in read_html and f"Written after the night of {first}" in read_html
    assert f"<td>{first}</td>" in read_html
