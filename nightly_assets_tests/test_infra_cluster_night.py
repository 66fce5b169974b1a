"""A real night of a small project whose stand-in database dies under part of its suite: one infra
alert naming the signature, the resource and the tests, no broken-test alert for them, and the
night's summary groups the failures by signature."""

from __future__ import annotations

import json
import socketserver
import threading
from pathlib import Path

import pytest

from nightly_assets_tests.catalog_nights import CatalogNights
from nightly_assets_tests.git_repo import commit_files, git
from nightly_assets_tests.suite_projects import (
    FLAKY_TESTS,
    flit_project,
    night_store,
    project_pipeline,
    suite_stage,
)

USES_DB = 4  # of the suite's ten tests
TESTS = "\n".join(
    [
        "import pathlib",
        "import socket",
        "",
        "PORT = pathlib.Path({port_file!r})",
        "",
        "",
        "def query():",
        '    with socket.create_connection(("127.0.0.1", int(PORT.read_text())), timeout=5):',
        "        return 1",
        "",
        *(f"\n\ndef test_db_{i}():\n    assert query() == 1" for i in range(USES_DB)),
        *(f"\n\ndef test_pure_{i}():\n    assert {i} + 1 == {i + 1}" for i in range(10 - USES_DB)),
        "",
    ]
)


class _Quiet(socketserver.BaseRequestHandler):
    def handle(self) -> None:  # accept, then hang up: a database that answers
        pass


@pytest.mark.slow
def test_a_service_dying_under_part_of_a_suite_is_one_infra_alert(
    catalog_nights: CatalogNights, tmp_path: Path, wheelhouse: Path
) -> None:
    server = socketserver.TCPServer(("127.0.0.1", 0), _Quiet)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port_file = tmp_path / "port"
    port_file.write_text(str(server.server_address[1]))
    repo = tmp_path / "upstream" / "dbpkg"
    files = {
        "dbpkg/__init__.py": '"""A client."""\n',
        "tests/test_db.py": TESTS.format(port_file=str(port_file)),
    }
    commit_files(repo, flit_project("dbpkg", "A client of a database.", files))
    pipeline = project_pipeline(
        "dbpkg", repo, "Four tests of ten use a database.", [suite_stage(), FLAKY_TESTS]
    )
    _, stages, outcome = catalog_nights.run(pipeline, "2026-11-03")
    assert outcome.succeeded, {s.stage: s.detail for s in stages.values()}

    # A commit lands (the pins move: a failure now would name it) and the database dies.
    (repo / "dbpkg/__init__.py").write_text('"""A client, documented."""\n')
    git(repo, "commit", "-qam", "document the client")
    server.shutdown()
    server.server_close()
    key, stages, outcome = catalog_nights.run(pipeline, "2026-11-04")
    detail = stages["tests"].detail or ""
    assert detail.startswith(f"6/10 passed ({USES_DB} failed)"), detail

    warns = [json.loads(line) for line in (catalog_nights.home / "alerts.jsonl").read_text().splitlines()]
    lines = [w for alert in warns if alert["severity"] == "warn" for w in alert["lines"]]
    assert not [w for w in lines if "no_new_broken_test" in w], lines
    [infra] = [w for w in lines if "no_infra_event" in w]
    assert (
        f"tests: {USES_DB} tests failed with `ConnectionRefusedError: [Errno <n>] Connection refused`"
        in infra
    )
    assert "tests.test_db::test_db_0, tests.test_db::test_db_1" in infra
    with night_store(catalog_nights.home) as store:
        assert store.verdicts(key, state="broken") == []
        [check] = [c for c in store.checks(key) if c.name == "no_infra_event"]
        assert not check.passed
    summary = (catalog_nights.home / "artefacts/dbpkg/2026-11-04/cpu/night_summary/summary.md").read_text()
    assert f"- tests: {USES_DB} tests: `ConnectionRefusedError: [Errno <n>] Connection refused`" in summary
