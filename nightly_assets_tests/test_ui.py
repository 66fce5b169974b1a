"""The Dagster UI as a release engineer uses it: `dagster dev` (webserver + daemon) over an instance
with failed nights, driven in headless Chromium through Playwright.

What is checked is what a person sees and does: every pipeline's lineage, a failed night shown
failed on its test report, a backfill of the failed nights launched from the UI's own dialog and a
re-execution from failure, each followed by the same alerts, summary and warehouse state as a
scheduled night gets.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import datetime as dt
import functools
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dagster as dg
import pytest
from dagster._core.storage.partition_status_cache import AssetPartitionStatus

from nightly_assets.artefacts.serve import make_server
from nightly_assets.catalog.loader import load_catalog
from nightly_assets.results import NightKey
from nightly_assets.warehouse.store import Warehouse
from nightly_assets_tests.peers.process import free_port
from nightly_assets_tests.waiting import wait_for as wait_scaled

pytestmark = [pytest.mark.browser, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[1]
# How long `dagster dev` gets to stop on SIGINT: its daemon and webserver stop in a second or two.
DEV_STOP_GRACE_S = 15
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
FAILED_NIGHTS = ("2026-11-07", "2026-11-08")  # commit 0.2.0 of 11-06: test_mean fails
GOOD_NIGHT = "2026-11-03"  # commit 0.1.0 of 11-01: every test passes
MISSING_NIGHT = "2026-11-21"  # never run
# demo_gpu, a pipeline without a release stage: a good night, then a commit dated inside 11-12
# that breaks a unit test (pushed in the fixture), so the night of 11-12 fails on tests_unit.
GPU_GOOD_NIGHT, GPU_FAILED_NIGHT, GPU_MISSING_NIGHT = "2026-11-10", "2026-11-12", "2026-11-13"
# The UI answers within seconds on a quiet machine; runs and sensor ticks within minutes.
wait_for = functools.partial(wait_scaled, timeout_s=240, every_s=1)


@dataclass
class UI:
    url: str
    env: dict[str, str]
    nightly_home: Path
    dagster_home: Path
    first_runs: dict[str, str]  # night -> run id of the CLI night that failed (not its summary run)
    pins: dict[str, dict[str, str]]  # night -> pins the CLI night recorded

    @property
    def store(self) -> Warehouse:
        return Warehouse(f"sqlite:///{self.nightly_home}/warehouse.sqlite")

    def instance(self) -> dg.DagsterInstance:
        return dg.DagsterInstance.from_config(str(self.dagster_home))

    def alerts(self) -> list[dict[str, Any]]:
        path = self.nightly_home / "alerts.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _cli(env: dict[str, str], *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "nightly_assets.cli", *argv],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def _late_upstream_commit(nightly_home: Path, env: dict[str, str]) -> None:
    """A commit pushed after the night ran but dated inside it: re-resolving the branch now would
    pick it, so a backfill that pins it would test code the night never saw."""
    upstream = nightly_home / "git" / "sample" / "nightlysample"
    when = "2026-11-07T22:00:00Z"
    git_env = {**env, "GIT_AUTHOR_DATE": when, "GIT_COMMITTER_DATE": when}
    git_env |= {"GIT_AUTHOR_NAME": "late", "GIT_AUTHOR_EMAIL": "l@x", "GIT_COMMITTER_NAME": "late"}
    git_env |= {"GIT_COMMITTER_EMAIL": "l@x"}
    subprocess.run(
        ["git", "-C", str(upstream), "commit", "-q", "--allow-empty", "-m", "pushed late"],
        env=git_env,
        check=True,
    )


def _break_a_gpu_unit_test(nightly_home: Path, env: dict[str, str]) -> None:
    """A commit dated inside GPU_FAILED_NIGHT that adds a failing unit test to nightlygpu."""
    upstream = nightly_home / "git" / "sample" / "nightlygpu"
    with (upstream / "tests" / "test_unit.py").open("a") as tests:
        tests.write(
            "\n\n@pytest.mark.unit\ndef test_broken_tonight():\n"
            "    assert nightlygpu.matmul_flops(1, 1, 1) == 3, 'broken by the commit of the night'\n"
        )
    when = f"{GPU_FAILED_NIGHT}T12:00:00Z"
    git_env = {**env, "GIT_AUTHOR_DATE": when, "GIT_COMMITTER_DATE": when}
    git_env |= {"GIT_AUTHOR_NAME": "late", "GIT_AUTHOR_EMAIL": "l@x", "GIT_COMMITTER_NAME": "late"}
    git_env |= {"GIT_COMMITTER_EMAIL": "l@x"}
    subprocess.run(
        ["git", "-C", str(upstream), "commit", "-q", "-am", "a unit test that fails"], env=git_env, check=True
    )


@pytest.fixture(scope="module")
def ui(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UI]:
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: `apt-get install chromium` (or deselect -m browser)")
    base = tmp_path_factory.mktemp("ui")
    nightly_home, dagster_home = base / "nightly", base / "dagster_home"
    artefacts = make_server(nightly_home / "artefacts", "127.0.0.1", free_port())
    threading.Thread(target=artefacts.serve_forever, daemon=True).start()
    env = {
        **os.environ,
        "NIGHTLY_HOME": str(nightly_home),
        "DAGSTER_HOME": str(dagster_home),
        "NIGHTLY_ENV": "local",
        "NIGHTLY_ARTEFACTS_URL": f"http://127.0.0.1:{artefacts.server_port}",
        "DOCKER_HOST": "unix:///nonexistent/nightly-no-docker.sock",  # the demo's virtualenv path
        "PYTHONUNBUFFERED": "1",
        "NIGHTLY_RESULTS_SITE": "1",  # as outside the tests: every launch path rebuilds the site
    }
    for name in (
        "NIGHTLY_WAREHOUSE_URL",
        "NIGHTLY_CATALOG_DIR",
        "NIGHTLY_ARTEFACTS_BUCKET",
        "NIGHTLY_RUNNER_POOL",
    ):
        env.pop(name, None)
    assert _cli(env, "init").returncode == 0

    # Two first nights at once on this new home (demo's and demo_gpu's, as two schedules would
    # start them): both create the warehouse they find missing, and both run.
    def demo_nights() -> list[subprocess.CompletedProcess[str]]:
        return [_cli(env, "run", "demo", "--night", night) for night in (*FAILED_NIGHTS, GOOD_NIGHT)]

    def demo_gpu_nights() -> list[subprocess.CompletedProcess[str]]:
        good = _cli(env, "run", "demo_gpu", "--night", GPU_GOOD_NIGHT)
        _break_a_gpu_unit_test(nightly_home, env)
        return [good, _cli(env, "run", "demo_gpu", "--night", GPU_FAILED_NIGHT)]

    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        demo, gpu = pool.submit(demo_nights), pool.submit(demo_gpu_nights)
        nights = demo.result() + gpu.result()
    # The failed nights the schedule ran, then the good ones.
    assert [n.returncode for n in nights] == [1, 1, 0, 0, 1], "\n".join(n.stdout + n.stderr for n in nights)
    first_runs, pins = {}, {}
    store = Warehouse(f"sqlite:///{nightly_home}/warehouse.sqlite")
    for pipeline, night, target in [
        *(("demo", n, "cpu") for n in FAILED_NIGHTS),
        ("demo_gpu", GPU_FAILED_NIGHT, "gpu"),
    ]:
        row = store.night(NightKey(pipeline, dt.date.fromisoformat(night), target))
        assert row is not None and row.status == "failure"
        first_runs[night], pins[night] = store.night_runs(row.key)[0].run_id, row.pins
    store.dispose()
    _late_upstream_commit(nightly_home, env)

    port = free_port()
    log = (base / "dagster_dev.log").open("wb")
    server = subprocess.Popen(
        [
            str(Path(sys.executable).parent / "dagster"),
            "dev",
            "-w",
            "workspace.yaml",
            "-h",
            "127.0.0.1",
            "-p",
            str(port),
        ],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # SIGINT to the group stops webserver, daemon and code server
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for("the Dagster UI", lambda: _code_location_loaded(url, server), timeout_s=180)
        yield UI(url, env, nightly_home, dagster_home, first_runs, pins)
    finally:
        # The group's SIGINT stops the daemon within a second (its log says so), but `dagster dev`
        # itself then waited out a full minute in every CI run: SIGTERM, then SIGKILL, sooner.
        for stop, grace_s in ((signal.SIGINT, DEV_STOP_GRACE_S), (signal.SIGTERM, 5), (signal.SIGKILL, 10)):
            try:
                os.killpg(server.pid, stop)
                server.wait(timeout=grace_s)
                break
            except ProcessLookupError:
                break
            except subprocess.TimeoutExpired:
                continue
        artefacts.shutdown()
        artefacts.server_close()


def _code_location_loaded(url: str, server: subprocess.Popen[bytes]) -> bool:
    if server.poll() is not None:
        raise AssertionError(f"dagster dev exited {server.returncode}")
    query = "{ workspaceOrError { ... on Workspace { locationEntries { name loadStatus } } } }"
    request = urllib.request.Request(  # noqa: S310 - http://127.0.0.1 only
        f"{url}/graphql",
        data=json.dumps({"query": query}).encode(),
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=5) as response:  # noqa: S310
            entries = json.loads(response.read())["data"]["workspaceOrError"]["locationEntries"]
    except (OSError, KeyError, TypeError, ValueError):
        return False
    return any(e["name"] == "nightly_assets" and e["loadStatus"] == "LOADED" for e in entries)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser: Any, ui: UI) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1600, "height": 1000})
    # The "join the community" dialog of a new browser, dismissed as its Skip button does: it can
    # open seconds after a page loads on a busy machine, over whatever is clicked next.
    context.add_init_script("window.localStorage.setItem('communityNux', JSON.stringify('1'))")
    page = context.new_page()
    page.set_default_timeout(30_000)
    yield page
    context.close()


def open_page(page: Any, ui: UI, path: str) -> None:
    page.goto(f"{ui.url}{path}")
    skip = page.get_by_role("button", name="Skip")  # the "join the community" prompt of a new browser
    with contextlib.suppress(Exception):  # no prompt this time
        skip.click(timeout=3000)


# A graph node shows its name in a tooltip'd title or, zoomed out, shortened as its only text.
NODE_LABELS = "nodes => nodes.map(n => n.querySelector('[data-tooltip]')?.dataset.tooltip ?? n.textContent)"


def node_labels(page: Any) -> list[str]:
    """The names on the lineage graph's asset nodes."""
    return [label.strip() for label in page.locator("svg foreignObject").evaluate_all(NODE_LABELS) if label]


def shown_as(name: str, label: str) -> bool:
    """Whether the graph's node label is `name`, maybe shortened in the middle ("tests_py…_in_scope")."""
    head, ellipsis, tail = label.partition("…")
    return label == name or bool(ellipsis and name.startswith(head) and name.endswith(tail))


def test_the_lineage_of_every_pipeline_renders(page, ui):
    catalog = load_catalog()
    for pipeline in catalog.pipelines.values():
        open_page(page, ui, f"/locations/nightly_assets/asset-groups/{pipeline.name}/lineage")
        labels = wait_for(
            f"{pipeline.name}'s {len(pipeline.stages)} asset nodes",
            lambda pipeline=pipeline: (
                found if len(found := node_labels(page)) >= len(pipeline.stages) else None
            ),
            timeout_s=30,
        )
        for stage in pipeline.stages:
            assert any(shown_as(stage.name, label) for label in labels), (pipeline.name, stage.name, labels)


def test_a_failed_night_is_failed_on_its_test_report(page, ui):
    """The failed night's partition of its test report reads Failed, in the partitions bar and on the
    partition; its run link opens the step failure with the evidence (verdict, failing test with its
    message, links to the reports); its blocking check failed; its summary is materialized."""
    night = FAILED_NIGHTS[0]
    open_page(page, ui, f"/assets/demo/tests_unit?view=partitions&partition={night}|cpu")
    page.get_by_text("failed, and did not materialize this asset", exact=False).wait_for()
    text = page.locator("body").inner_text()
    assert f"{night}|cpu" in text
    assert f"Failed ({len(FAILED_NIGHTS)})" in text  # the partitions bar counts them failed
    page.get_by_role("button", name="View logs").click()  # the run's step failure: the evidence
    page.get_by_text("verdict", exact=True).first.wait_for()
    text = page.locator("body").inner_text()
    assert "FAILED: " in text and "1 failed of" in text  # the verdict, with the counts below it
    assert "tests.test_reduce::test_mean" in text and "assert 4.0 == 3.0" in text  # with its message
    link = page.locator('a[href$="/tests_unit/pytest.log"]').first
    href = link.get_attribute("href")
    assert href is not None and href.startswith(ui.env["NIGHTLY_ARTEFACTS_URL"])
    with urllib.request.urlopen(href, timeout=10) as response:  # noqa: S310 - the link under test
        assert b"test_mean" in response.read()

    open_page(page, ui, "/assets/demo/tests_unit?view=checks&checkDetail=tests_passed")
    page.get_by_text("Execution history", exact=True).click()
    for night in FAILED_NIGHTS:
        row = page.get_by_role("row").filter(has_text=f"{night}|cpu")
        row.first.wait_for()
        assert "Failed" in row.first.inner_text()
        assert "tests.test_reduce::test_mean" in row.first.inner_text()
    instance = ui.instance()
    defs_partitions = dg.MultiPartitionsDefinition(
        {
            "night": dg.DailyPartitionsDefinition("2026-11-01"),
            "target": dg.StaticPartitionsDefinition(["cpu"]),
        }
    )
    for night in FAILED_NIGHTS:  # Dagster's own state: Failed, not materialized; the summary is
        partition = f"{night}|cpu"
        suite, summary = dg.AssetKey(["demo", "tests_unit"]), dg.AssetKey(["demo", "night_summary"])
        assert partition not in instance.get_materialized_partitions(suite)
        status = instance.get_status_by_partition(suite, [partition], defs_partitions) or {}
        assert status.get(partition) == AssetPartitionStatus.FAILED
        assert partition in instance.get_materialized_partitions(summary)


def test_the_alerts_sent_are_on_the_night_summary_as_failed_checks(page, ui):
    """Each alert that went out shows on its night's summary as the night_alert check, failed (red
    for an error alert), with its text, where it went and the run it is about."""
    open_page(page, ui, "/assets/demo/night_summary?view=checks&checkDetail=night_alert")
    page.get_by_text("Execution history", exact=True).click()
    row = page.get_by_role("row").filter(has_text=f"{FAILED_NIGHTS[0]}|cpu")
    row.first.wait_for()
    shown = row.first.inner_text()
    assert "Failed" in shown and f"demo night {FAILED_NIGHTS[0]} cpu failed" in shown
    assert f"error alert sent to file {ui.nightly_home / 'alerts.jsonl'}" in shown
    good = page.get_by_role("row").filter(has_text=f"{GOOD_NIGHT}|cpu")
    assert "Passed" in good.first.inner_text() and "no alert was sent" in good.first.inner_text()
    # The run it is about shows it too, among its failed checks, with where it went.
    open_page(page, ui, f"/runs/{ui.first_runs[FAILED_NIGHTS[0]]}?logs=type%3AASSET_CHECK_EVALUATION")
    page.get_by_text("Check night_alert failed", exact=False).first.wait_for()
    assert f"file {ui.nightly_home / 'alerts.jsonl'}" in page.locator("body").inner_text()


def _dialog_nights(page: Any, nights: list[str]) -> Any:
    """The open launch dialog with `nights` x every target, "only failed and missing" ticked."""
    dialog = page.get_by_role("dialog")
    box = dialog.get_by_placeholder("ex: 2026-11-01", exact=False)
    box.fill(", ".join(nights))
    box.press("Enter")
    dialog.get_by_role("button", name="All").nth(1).click()  # every target
    dialog.get_by_text("Backfill only failed and missing partitions", exact=False).first.click()
    return dialog


def test_a_suites_own_dialog_picks_its_failed_and_missing_nights(page, ui):
    """From the suite's own "Materialize…" (no release in the selection), "only failed and missing"
    picks the failed nights and the missing one, not the good night."""
    open_page(page, ui, "/assets/demo/tests_unit")
    page.get_by_role("button", name="Materialize…").first.click()
    dialog = _dialog_nights(page, [GOOD_NIGHT, *FAILED_NIGHTS, MISSING_NIGHT])
    dialog.get_by_text("Only 3 failed and missing partitions", exact=False).wait_for()
    dialog.get_by_role("button", name="Cancel", exact=True).click()


def test_a_backfill_from_the_dialog_and_a_re_execution_from_failure_are_followed_up(page, ui):
    alerts_before = len(ui.alerts())
    open_page(page, ui, "/locations/nightly_assets/asset-groups/demo/lineage")
    page.get_by_text("Materialize all…", exact=True).click()
    dialog = _dialog_nights(page, [GOOD_NIGHT, *FAILED_NIGHTS])  # the good night is left out
    dialog.get_by_text(f"Only {len(FAILED_NIGHTS)} failed and missing partitions", exact=False).wait_for()
    dialog.get_by_role("button", name="Launch backfill").click()

    instance = ui.instance()
    backfill = wait_for("the backfill", lambda: next(iter(instance.get_backfills()), None))
    runs = wait_for(
        "both nights' runs to end",
        lambda: finished(instance, dg.RunsFilter(tags={"dagster/backfill": backfill.backfill_id}), 2),
    )
    assert {r.tags["dagster/partition"] for r in runs} == {f"{n}|cpu" for n in FAILED_NIGHTS}
    assert {r.status for r in runs} == {dg.DagsterRunStatus.FAILURE}  # the nights' code still fails
    _assert_followed_up(ui, instance, runs, alerts_before)

    for night in FAILED_NIGHTS:
        key = NightKey("demo", dt.date.fromisoformat(night), "cpu")
        row = ui.store.night(key)
        assert row is not None and row.pins == ui.pins[night], "the backfill pinned another commit"
        assert row.run_id != ui.first_runs[night]
        stages = ui.store.stages(key)
        assert len(stages) == len({s.stage for s in stages}) == 11  # replaced, never duplicated
        runs_of_night = ui.store.night_runs(key)  # the first run stays on record beside the backfill's
        assert ui.first_runs[night] in {r.run_id for r in runs_of_night} and runs_of_night[0].current
        # the suites failed: the summary run judged the test health and wrote the summary
        assert {s.run_id for s in stages if s.stage not in ("flaky_tests", "night_summary")} == {
            next(r.run_id for r in runs if r.tags["dagster/partition"] == f"{night}|cpu")
        }

    # Then one of those runs, re-executed from failure from its run page.
    failed = next(r for r in runs if r.tags["dagster/partition"] == f"{FAILED_NIGHTS[0]}|cpu")
    alerts_before = len(ui.alerts())
    open_page(page, ui, f"/runs/{failed.run_id}")
    _re_execute_from_failure(page, failed.run_id)
    page.wait_for_url(lambda url: failed.run_id not in url)  # the new run's page
    rerun = wait_for(
        "the re-execution to end",
        lambda: next(
            (
                r
                for r in instance.get_runs(dg.RunsFilter(tags={"dagster/parent_run_id": failed.run_id}))
                if r.is_finished
            ),
            None,
        ),
    )
    assert rerun.status == dg.DagsterRunStatus.FAILURE
    _assert_followed_up(ui, instance, [rerun], alerts_before)
    key = NightKey("demo", dt.date.fromisoformat(FAILED_NIGHTS[0]), "cpu")
    stages = {s.stage: s for s in ui.store.stages(key)}
    assert stages["tests_unit"].run_id == rerun.run_id and stages["tests_unit"].status == "failure"
    assert stages["sources"].run_id == failed.run_id  # from failure: the pinned checkout is reused


def test_a_pipeline_without_release_backfills_its_failed_night_from_the_dialog(page, ui):
    """demo_gpu has no release stage: "only failed and missing" still picks its failed night (and
    the missing one, not the good one); the backfill re-runs the failed night on the night's pins,
    its suite again, and the backfill page counts the suite failed and the stages before it done."""
    open_page(page, ui, "/locations/nightly_assets/asset-groups/demo_gpu/lineage")
    page.get_by_text("Materialize all…", exact=True).click()
    dialog = _dialog_nights(page, [GPU_GOOD_NIGHT, GPU_FAILED_NIGHT, GPU_MISSING_NIGHT])
    dialog.get_by_text("Only 2 failed and missing partitions", exact=False).wait_for()
    dialog.get_by_role("button", name="Launch backfill").click()

    instance = ui.instance()
    gpu_backfills = lambda: [  # noqa: E731 - a query the wait repeats
        b for b in instance.get_backfills() if "demo_gpu" in str(b.asset_selection)
    ]
    backfill = wait_for("the demo_gpu backfill", lambda: next(iter(gpu_backfills()), None))
    runs = wait_for(
        "both nights' runs to end",
        lambda: finished(instance, dg.RunsFilter(tags={"dagster/backfill": backfill.backfill_id}), 2),
    )
    by_night = {r.tags["dagster/partition"]: r for r in runs}
    assert set(by_night) == {f"{GPU_FAILED_NIGHT}|gpu", f"{GPU_MISSING_NIGHT}|gpu"}
    failed_run = by_night[f"{GPU_FAILED_NIGHT}|gpu"]
    assert failed_run.status == dg.DagsterRunStatus.FAILURE  # the night's code still fails
    key = NightKey("demo_gpu", dt.date.fromisoformat(GPU_FAILED_NIGHT), "gpu")
    row = ui.store.night(key)  # the pins the sources stage of the backfill's run recorded
    assert row is not None and row.pins == ui.pins[GPU_FAILED_NIGHT]
    stages = {s.stage: s for s in ui.store.stages(key)}
    assert stages["tests_unit"].run_id == failed_run.run_id and stages["tests_unit"].status == "failure"
    runs_of_night = {r.run_id for r in ui.store.night_runs(key)}
    assert runs_of_night >= {failed_run.run_id, ui.first_runs[GPU_FAILED_NIGHT]}  # both on record

    # The backfill page, per asset: partitions targeted, in progress, succeeded, failed (the
    # daemon brings the backfill's counts up to date a few seconds after its runs end).
    open_page(page, ui, f"/runs/b/{backfill.backfill_id}?tab=overview")
    expected = {"demo_gpu / sources": ["2", "0", "2", "0"], "demo_gpu / tests_unit": ["2", "0", "0", "2"]}
    seen: dict[str, list[str]] = {}

    def counts_shown() -> bool:
        seen.update({asset: _backfill_counts(page, asset) for asset in expected})
        if seen == expected:
            return True
        page.reload()
        return False

    # Every 4 s: each probe reloads the page, a second of Chromium and GraphQL on a loaded machine.
    try:
        wait_for("the backfill page's counts", counts_shown, timeout_s=120, every_s=4)
    except AssertionError as error:  # what the page showed last, not what it showed before the wait
        raise AssertionError(f"{error}: expected {expected}, last seen {seen}") from None

    # The results site, rebuilt by the backfill's summary runs as by a CLI night's: both nights failed.
    index = ui.nightly_home / "artefacts/demo_gpu/site/results/index.json"

    def site_nights() -> dict[str, str] | None:
        listed = (
            {n["night"]: n["status"] for n in json.loads(index.read_text())["nights"]}
            if index.exists()
            else {}
        )
        wanted = {GPU_FAILED_NIGHT: "failure", GPU_MISSING_NIGHT: "failure"}
        return listed if all(listed.get(night) == status for night, status in wanted.items()) else None

    listed = wait_for("the results site to list the backfilled nights", site_nights, timeout_s=120)
    assert listed[GPU_GOOD_NIGHT] == "success"
    page.goto(ui.env["NIGHTLY_ARTEFACTS_URL"] + "/demo_gpu/site/index.html")
    assert page.locator(f"tr:has(th:has-text('{GPU_MISSING_NIGHT}')) td.s-failure").count() >= 1


def _backfill_counts(page: Any, asset: str) -> list[str]:
    """The last four cells of the backfill page's row of `asset` (a virtualized table of divs)."""
    row = page.locator("[class*=VirtualizedTable_row]").filter(has_text=asset).first
    row.wait_for()
    return row.inner_text().split()[-4:]


def _re_execute_from_failure(page: Any, run_id: str) -> None:
    """The run page's re-execute menu, "From failure", then "Confirm" where the UI asks (the dialog
    "Re-execution within backfill: ... will not update the backfill status"; seen only some of the
    time, else the re-execution launches at once and the page moves to the new run). A click on
    the menu while the page still settles can be lost: then the page is loaded again."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    confirm = page.get_by_role("dialog").get_by_role("button", name="Confirm")
    missed = []
    for attempt in range(3):
        if attempt:
            if run_id not in page.url:  # the previous try launched it after all
                return
            page.reload()  # a page that re-rendered under the click (seen on a loaded CI machine)
        try:
            # A finished night's run page can take a minute to render its logs on a loaded machine.
            page.get_by_role("button", name="Re-execute all (*)").wait_for(timeout=90_000)
            page.locator("button:right-of(:text('Re-execute all (*)'))").first.click()
            page.get_by_role("menuitem", name="From failure").click()
            outcome = wait_for(
                "the confirmation dialog or the new run's page",
                lambda: "confirm" if confirm.is_visible() else ("moved" if run_id not in page.url else None),
                timeout_s=30,
            )
        except (PlaywrightTimeout, AssertionError) as error:
            missed.append(str(error).splitlines()[0])
            page.keyboard.press("Escape")  # the menu, if it stayed open
            continue
        if outcome == "confirm":
            confirm.click()
        return
    buttons = page.get_by_role("button").all_inner_texts()
    menu = page.get_by_role("menuitem").all_inner_texts()
    raise AssertionError(
        f"the re-execution dialog did not open after three tries: {missed}; buttons {buttons}; menu {menu}"
    )


def finished(instance: dg.DagsterInstance, runs: dg.RunsFilter, count: int) -> list[dg.DagsterRun] | None:
    """The runs matching `runs` once there are `count` of them and all have ended."""
    found = list(instance.get_runs(runs))
    return found if len(found) == count and all(r.is_finished for r in found) else None


def _assert_followed_up(
    ui: UI, instance: dg.DagsterInstance, runs: list[dg.DagsterRun], alerts_before: int
) -> None:
    """What every finished night run gets under the daemon: an error alert naming the failing test,
    a summary run writing the night's final status, and no stage left running."""
    run_ids = {r.run_id for r in runs}

    def alerts_of_the_runs() -> list[dict[str, Any]]:
        return [a for a in ui.alerts()[alerts_before:] if a["run_id"] in run_ids]

    wait_for("the failure sensor's alerts", lambda: {a["run_id"] for a in alerts_of_the_runs()} == run_ids)
    time.sleep(2)  # a second alert of one run would come in the same sensor tick
    # One error alert per run (a loaded machine may add a warn alert for a noisy benchmark).
    alerts = [a for a in alerts_of_the_runs() if a["severity"] == "error"]
    assert sorted(a["run_id"] for a in alerts) == sorted(run_ids), "one error alert per run"
    for alert in alerts:
        assert "tests.test_reduce::test_mean" in "\n".join(alert["lines"])

    def summary_of(run: dg.DagsterRun) -> dg.DagsterRun:
        tagged = dg.RunsFilter(tags={"nightly/summary_of": run.run_id})
        return wait_for("the follow-up summary run", lambda: finished(instance, tagged, 1))[0]

    summaries = [summary_of(run) for run in runs]
    assert {r.status for r in summaries} == {dg.DagsterRunStatus.SUCCESS}
    for run in runs:
        night, target = run.tags["dagster/partition"].split("|")
        key = NightKey("demo", dt.date.fromisoformat(night), target)
        row = ui.store.night(key)
        assert row is not None and row.status == "failure"
        assert "running" not in {s.status for s in ui.store.stages(key)}
        summary = (ui.nightly_home / f"artefacts/demo/{night}/{target}/night_summary/summary.md").read_text()
        assert "| tests_unit | tests.test_reduce::test_mean | failed |" in summary
