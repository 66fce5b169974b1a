"""`nightly run` and `nightly status` as a release engineer types them."""

import json

import pytest

from nightly_assets.cli import main


@pytest.fixture
def dagster_home(tmp_path, monkeypatch, nightly_home):
    home = tmp_path / "dagster_home"
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    return home


@pytest.mark.slow
def test_run_prints_progress_and_the_summary_then_status_shows_the_night(dagster_home, capsys):
    assert main(["run", "demo", "--night", "2026-11-03"]) == 0
    out = capsys.readouterr().out
    assert "started  demo__sources" in out and "done     demo__release" in out
    assert "check    demo/tests_unit:tests_passed passed" in out
    assert "| Stage | Status | Runner | Duration (min) | Artifacts | Detail |" in out
    assert (dagster_home / "dagster.yaml").is_file()  # the instance was set up with the repo's config

    assert main(["status", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [(r["pipeline"], r["night"], r["target"], r["status"]) for r in rows] == [
        ("demo", "2026-11-03", "cpu", "success")
    ]
    assert rows[0]["tests"]["tests_unit"]["passed"] == 7
    assert set(rows[0]["stages"].values()) == {"success"}

    assert main(["status", "--pipeline", "demo"]) == 0
    text = capsys.readouterr().out
    assert "2026-11-03  cpu             success   9/9" in text


def test_status_before_any_night_says_how_to_run_one(dagster_home, capsys):
    assert main(["status"]) == 0
    assert "nightly run demo --night" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["run", "nope", "--night", "2026-11-03"], "unknown pipeline 'nope'; the catalog has: demo, dynamo"),
        (["run", "demo", "--night", "03/11/2026"], "--night '03/11/2026': expected a date as YYYY-MM-DD"),
        (["run", "demo", "--night", "2020-01-01"], "pipeline 'demo' has nights from 2026-11-01"),
        (
            ["run", "demo", "--night", "2026-11-03", "--target", "gpu"],
            "--target 'gpu': pipeline 'demo' has targets cpu",
        ),
        (["status", "--pipeline", "nope"], "unknown pipeline 'nope'"),
    ],
)
def test_bad_arguments_exit_2_with_a_clear_message(dagster_home, capsys, argv, message):
    assert main(argv) == 2
    assert message in capsys.readouterr().err
