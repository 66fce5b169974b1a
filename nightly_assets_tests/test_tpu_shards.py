"""A sharded suite on TPU VMs end to end: the `tpu` pipeline's night with `shards: 2`, one VM per
shard made by the real TpuClient against the fake TPU API and reached over a real sshd; the plan
from the warehouse's recorded tests (no collection VM), a preempted shard re-run alone on a new VM,
the pool bound, one cost row per VM. And the VM's shard plugin on a tiny project."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import signal
import subprocess
import sys
import zlib
from pathlib import Path
from typing import Any

import pytest

from nightly_assets.resources import resources_for
from nightly_assets.results import NightKey, TestCase, TestReport
from nightly_assets.tpu.checks import COST_WITHIN_BUDGET, VM_DELETED
from nightly_assets.tpu.remote_shard import shard_of
from nightly_assets.tpu.ssh import PID_FILE
from nightly_assets_tests.git_repo import commit_folder
from nightly_assets_tests.peers.tpu_api import FakeTpuApi
from nightly_assets_tests.tpu_harness import KEY, make_sglang_repo

TONIGHT = NightKey("tpu", dt.date(2026, 11, 4), "v6e-1")
SHARDS = {"shards": 2}
CLASS = "test.srt.test_score_api.TestScoreAPI"
BATCH = "    def test_batch(self):\n        self.assertEqual([scoreapi.score(x) for x in (1, 2)], [2, 4])\n"


def _store(home: Path) -> Any:
    return resources_for("local", home)["warehouse"].store()


def _with_test(repo: Path, name: str, replacing: str | None = None) -> None:
    """Add the tpu test `name` to the suite's class (in place of `replacing`), committed."""
    path = repo / "test" / "srt" / "test_score_api.py"
    text = path.read_text()
    if replacing is not None:
        text = text.replace(f"\n    def {replacing}(self):\n        pass\n", "")
    path.write_text(text.replace(BATCH, BATCH + f"\n    def {name}(self):\n        pass\n"))
    commit_folder(repo, f"add {name}")


def _recorded(home: Path, **seconds: float) -> None:
    """The night before tonight's recorded tests of the suite (test name -> seconds)."""
    cases = tuple(TestCase(CLASS, name, "passed", duration_s=s) for name, s in seconds.items())
    _store(home).record_test_report(KEY, TestReport("tests_tpu", cases, "tpu-v6e"))


def _stage_dir(home: Path, key: NightKey = TONIGHT) -> Path:
    return home / f"artefacts/tpu/{key.night.isoformat()}/{key.target}/tests_tpu"


def _shards(home: Path) -> dict[int, dict[str, Any]]:
    manifest = json.loads((_stage_dir(home) / "manifest.json").read_text())
    return {s["index"]: s for s in manifest["shards"]["shards"]}


def _cases(home: Path, key: NightKey) -> dict[str, tuple[str, str | None]]:
    return {c.node_id: (c.outcome, c.message) for c in _store(home).test_cases(key, "tests_tpu")}


def _ran_on(home: Path) -> dict[str, list[str]]:
    """Each test's shard JUnit files (the reporting attempts'), to see it ran exactly once."""
    ran: dict[str, list[str]] = {}
    for junit in sorted(_stage_dir(home).glob("shard-*/vm/junit.xml")):
        text = junit.read_text()
        for name in ("test_score", "test_batch", "test_new", "test_removed"):
            if f'name="{name}"' in text:
                ran.setdefault(name, []).append(junit.parts[-3])
    return ran


def _kill_suite_of(vm_root: Path):
    """on_preempt: the preempted "VM"'s suite dies with it (the others' go on)."""

    def kill(node_name: str) -> None:
        pid_file = vm_root / "nightly-runs" / node_name.rsplit("/", 1)[-1] / PID_FILE
        with contextlib.suppress(OSError, ValueError):
            os.killpg(int(pid_file.read_text().strip()), signal.SIGKILL)

    return kill


def test_a_sharded_suite_runs_a_vm_per_shard_once_tests_are_recorded(
    tpu_night, tpu_api: FakeTpuApi, nightly_home: Path, tmp_path: Path
) -> None:
    """The first night has no recorded tests: one VM, unsharded, saying why. The next night runs a
    VM per shard; its report is the first night's test by test, but for the test removed since
    (no "not run") and the one added (run exactly once)."""
    repo, _ = make_sglang_repo(tmp_path / "sglang")
    _with_test(repo, "test_removed")
    events: list[str] = []
    first, _ = tpu_night(suite=SHARDS, events=events)
    assert first.succeeded
    assert any("no recorded tests yet: one VM this night; sharded from the next" in e for e in events)
    [cost] = _store(nightly_home).costs(KEY)
    assert cost.stage == "tests_tpu" and len(tpu_api.created) == 1
    unsharded = _cases(nightly_home, KEY)
    assert set(unsharded) == {f"{CLASS}::test_{n}" for n in ("score", "batch", "removed")}

    _with_test(repo, "test_new", replacing="test_removed")
    events.clear()
    outcome, checks = tpu_night(suite=SHARDS, key=TONIGHT, events=events)
    store = _store(nightly_home)
    stage = {s.stage: s for s in store.stages(TONIGHT)}["tests_tpu"]
    assert outcome.succeeded, (stage.status, stage.detail)
    assert stage.detail == "3/3 passed; 2 shards"
    sharded = _cases(nightly_home, TONIGHT)
    expected = {t: v for t, v in unsharded.items() if not t.endswith("test_removed")}
    assert sharded == {**expected, f"{CLASS}::test_new": ("passed", None)}
    assert _ran_on(nightly_home)["test_new"] in (["shard-1"], ["shard-2"])  # exactly once
    assert sorted(len(v) for v in _ran_on(nightly_home).values()) == [1, 1, 1]
    manifest = json.loads((_stage_dir(nightly_home) / "manifest.json").read_text())
    assert manifest["shards"]["merge"]["not_run"] == 0 and manifest["shards"]["history_nights"] == 1
    assert any("1 planned test no longer selected" in e and "test_removed" in e for e in events), events
    costs = store.costs(TONIGHT)
    assert sorted(c.stage for c in costs) == ["tests_tpu/shard-1", "tests_tpu/shard-2"]
    assert {c.ended for c in costs} == {"completed"} and len({c.machine for c in costs}) == 2
    nodes = {a["node"] for s in _shards(nightly_home).values() for a in s["attempts"]}
    assert nodes == {c.machine.rsplit("/", 1)[-1] for c in costs}
    assert checks[VM_DELETED] is True and checks[COST_WITHIN_BUDGET] is True
    assert manifest["cost_usd"] == pytest.approx(sum(c.cost_usd for c in costs))
    deleted = next(c for c in store.checks(TONIGHT) if c.name == VM_DELETED)
    assert deleted.description.startswith("2 VM(s) deleted")
    assert tpu_api.node_names() == [] and not tpu_api.queued


def test_a_preempted_shard_runs_again_alone_on_a_new_vm(
    tpu_night, tpu_api: FakeTpuApi, nightly_home: Path, tmp_path: Path
) -> None:
    _recorded(nightly_home, test_score=2.0, test_batch=1.0)  # shard 1: test_score, shard 2: test_batch
    preempted: list[dict[str, str]] = []

    def first_vm_of_shard_1(labels: dict[str, str]) -> float | None:
        if labels.get("shard") == "1-of-2" and not preempted:
            preempted.append(labels)
            return 0.3
        return None

    tpu_api.preempt_if = first_vm_of_shard_1
    tpu_api.on_preempt = _kill_suite_of(tmp_path / "vm")
    outcome, _ = tpu_night(suite=SHARDS, key=TONIGHT)
    store = _store(nightly_home)
    stage = {s.stage: s for s in store.stages(TONIGHT)}["tests_tpu"]
    shards = _shards(nightly_home)
    assert outcome.succeeded, (stage.status, stage.detail)
    assert stage.detail == "2/2 passed; 2 shards (1 re-run)", shards
    assert [a["vm_ended"] for a in shards[1]["attempts"]] == ["preempted", "completed"]
    assert "ended early (preempted)" in shards[1]["attempts"][0]["lost"]
    assert [a["vm_ended"] for a in shards[2]["attempts"]] == ["completed"]
    assert sorted(c.stage for c in store.costs(TONIGHT)) == [
        "tests_tpu/shard-1",
        "tests_tpu/shard-1-try-2",
        "tests_tpu/shard-2",
    ]
    assert _cases(nightly_home, TONIGHT) == {
        f"{CLASS}::test_score": ("passed", None),
        f"{CLASS}::test_batch": ("passed", None),
    }
    assert len(tpu_api.created) == 3 and tpu_api.node_names() == []


def test_a_shard_preempted_on_every_attempt_leaves_its_tests_not_run(
    tpu_night, tpu_api: FakeTpuApi, nightly_home: Path, tmp_path: Path
) -> None:
    _recorded(nightly_home, test_score=2.0, test_batch=1.0)
    tpu_api.preempt_if = lambda labels: 0.3 if labels.get("shard") == "2-of-2" else None
    tpu_api.on_preempt = _kill_suite_of(tmp_path / "vm")
    outcome, checks = tpu_night(suite=SHARDS, key=TONIGHT)
    assert not outcome.succeeded
    cases = _cases(nightly_home, TONIGHT)
    assert cases[f"{CLASS}::test_score"] == ("passed", None)  # shard 1's result stands
    outcome_, message = cases[f"{CLASS}::test_batch"]
    assert outcome_ == "skipped" and (message or "").startswith("not run: shard 2 of 2 was lost")
    assert "preempted" in (message or "")
    store = _store(nightly_home)
    stage = {s.stage: s for s in store.stages(TONIGHT)}["tests_tpu"]
    assert stage.status == "failure" and "1 of 2 planned tests did not run" in (stage.detail or "")
    assert [a["vm_ended"] for a in _shards(nightly_home)[2]["attempts"]] == ["preempted", "preempted"]
    assert len(store.costs(TONIGHT)) == 3 and checks[VM_DELETED] is True
    assert tpu_api.node_names() == [] and not tpu_api.queued


def test_the_pool_bound_keeps_one_vm_at_a_time(tpu_night, tpu_api: FakeTpuApi, nightly_home: Path) -> None:
    _recorded(nightly_home, test_score=2.0, test_batch=1.0)
    outcome, _ = tpu_night(suite=SHARDS, key=TONIGHT, max_vms=1)
    assert outcome.succeeded
    assert len(tpu_api.created) == 2 and tpu_api.most_nodes == 1  # one after the other
    assert len(_store(nightly_home).costs(TONIGHT)) == 2
    assert tpu_api.node_names() == []


def test_each_shards_vm_confirms_its_own_failures(tpu_night, tpu_api: FakeTpuApi, nightly_home: Path) -> None:
    """test_score fails on shard 1's VM, which re-runs it there; the confirmation reads the
    rounds from every shard's files."""
    _recorded(nightly_home, test_score=2.0, test_batch=1.0)
    outcome, _ = tpu_night(suite=SHARDS, key=TONIGHT, expected=5)  # score(2) is 4: test_score fails
    assert not outcome.succeeded
    manifest = json.loads((_stage_dir(nightly_home) / "manifest.json").read_text())
    assert manifest["confirm"]["confirmed_failing"] == {f"{CLASS}::test_score": 3}
    assert [
        Path(j).relative_to(_stage_dir(nightly_home)).as_posix() for j in manifest["confirm"]["junit"]
    ] == [
        "shard-1/vm/confirm-1.xml",
        "shard-1/vm/confirm-2.xml",
    ]
    assert _cases(nightly_home, TONIGHT)[f"{CLASS}::test_batch"] == ("passed", None)
    assert tpu_api.node_names() == []


# -- the VM's plugin, on a tiny project ------------------------------------------------------------

PROJECT = {
    "conftest.py": 'def pytest_configure(config):\n    config.addinivalue_line("markers", "tpu: a TPU")\n',
    "tests/test_a.py": "import pytest\n\n"
    + "".join(f"@pytest.mark.tpu\ndef test_a{i}():\n    pass\n\n" for i in range(6))
    + "def test_cpu():\n    pass\n",
    "tests/test_b.py": "".join(f"def test_b{i}():\n    pass\n\n" for i in range(3)),
    "tests/test_new.py": "".join(f"def test_n{i}():\n    pass\n\n" for i in range(8)),
}
PLAN = {
    "shards": [
        {"index": 1, "units": ["tests/test_a.py::test_a0", "tests/test_b.py", "tests/test_gone.py::test_x"]},
        {"index": 2, "units": ["tests/test_a.py::test_a1", "tests/test_a.py::test_removed"]},
    ]
}


def _pytest(project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """pytest on the tiny project with the plugin and its plan, as remote_suite.py runs it."""
    plugin = ["-p", "nightly_assets.tpu.remote_shard", f"--nightly-shard-plan={project / 'plan.json'}"]
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *plugin, *args, "tests"],
        cwd=project,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])},
    )


def _shard_run(project: Path, index: int, *args: str) -> list[str]:
    """The node ids shard `index` kept (its --nightly-shard-selected file)."""
    selected = project / f"selected-{index}.json"
    done = _pytest(project, f"--nightly-shard-index={index}", f"--nightly-shard-selected={selected}", *args)
    assert done.returncode == 0, done.stdout + done.stderr
    return list(json.loads(selected.read_text()))


@pytest.fixture
def project(tmp_path: Path) -> Path:
    for name, text in PROJECT.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    (tmp_path / "plan.json").write_text(json.dumps(PLAN))
    return tmp_path


def test_the_shard_plugin_keeps_its_plan_and_hashes_new_tests_to_exactly_one_shard(project: Path) -> None:
    one, two = _shard_run(project, 1), _shard_run(project, 2)
    assert "tests/test_a.py::test_a0" in one and "tests/test_a.py::test_a0" not in two  # planned here
    assert "tests/test_a.py::test_a1" in two and "tests/test_a.py::test_a1" not in one  # planned there
    assert {f"tests/test_b.py::test_b{i}" for i in range(3)} <= set(one)  # a whole file's unit
    collected = [f"tests/test_a.py::test_a{i}" for i in range(6)] + ["tests/test_a.py::test_cpu"]
    collected += [f"tests/test_b.py::test_b{i}" for i in range(3)]
    collected += [f"tests/test_new.py::test_n{i}" for i in range(8)]
    assert sorted(one + two) == sorted(collected) and not set(one) & set(two)  # each exactly once
    new = [t for t in collected if "test_new" in t]
    assert {t for t in new if t in one} == {t for t in new if shard_of(t, {}, 2) == 1}
    assert shard_of("tests/test_new.py::test_n0", {}, 2) == zlib.crc32(b"tests/test_new.py::test_n0") % 2 + 1
    assert 0 < len([t for t in new if t in one]) < len(new)  # the hash spreads them


def test_the_shard_plugin_keeps_the_suites_own_selection(project: Path) -> None:
    """-m deselects first: a shard keeps its part of what the suite selects, no more."""
    one, two = _shard_run(project, 1, "-m", "tpu"), _shard_run(project, 2, "-m", "tpu")
    assert sorted(one + two) == [f"tests/test_a.py::test_a{i}" for i in range(6)]


def test_the_shard_plugin_refuses_an_index_outside_the_plan(project: Path) -> None:
    done = _pytest(project, "--nightly-shard-index=3")
    assert done.returncode == 4 and "--nightly-shard-index 3: expected 1 to 2" in done.stdout + done.stderr
