"""Bazel stages inside whole nights, on a pinned checkout of the tests' Bazel workspace: seed 000's
shape (wheels through RBE with a real BuildGrid remote cache, installed into a fresh environment;
the Bazel suite with the catalog's tag filters and flaky attempts, its report in the warehouse) and
seed 004's (Bazel bootstrapped from a pinned source tree, the sanity job imports its wheel on the
batch scheduler, the build is deployed)."""

import hashlib
import json
import secrets
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import dagster as dg
import pytest
import yaml

from nightly_assets.catalog.loader import catalog_dir
from nightly_assets.resources import resources_for
from nightly_assets.results import NightKey
from nightly_assets_tests.catalog_files import read_pipeline
from nightly_assets_tests.catalog_nights import CatalogNights
from nightly_assets_tests.git_repo import commit_folder
from nightly_assets_tests.peers.bazel import JVM_ARGS, BazelPeer
from nightly_assets_tests.peers.buildgrid import BuildGrid

pytestmark = [pytest.mark.bazel]

RBE_PIPELINE = """
name: rbe_wheels
title: Wheels through RBE
seed: "000"
description: The test workspace's wheels built through the RBE resource, installed and tested.
cron: "0 2 * * *"
start_date: 2026-11-01
repositories:
  - {{name: workspace, url: "{workspace}", branch: main}}
targets:
  - {{name: rocm-mi300, arch: amd64, devices: 8}}
stages:
  - {{name: sources, kind: sources, description: The pinned workspace.}}
  - name: wheels
    kind: wheels
    deps: [sources]
    runner: rbe-rocm
    description: The wheels from Bazel.
    params:
      builder: bazel
      bazel: {{targets: {targets}, args: ["--compilation_mode=fastbuild"]}}
  - {{name: environment, kind: environment, deps: [wheels], description: The wheels installed.}}
  - name: tests_multigpu
    kind: test_suite
    deps: [environment]
    description: The Bazel suite.
    suite:
      timeout_minutes: 30
      runner: rbe-rocm
      bazel:
        targets: ["//tests/..."]
        tag_filters: "gpu,cpu,-tpu,-config-cuda-only"
        flaky_test_attempts: 3
  - {{name: night_summary, kind: night_summary, deps: [tests_multigpu], description: Summary.}}
"""

THETA_PIPELINE = """
name: theta_bazel
title: Theta with Bazel from source
seed: "004"
description: Bazel bootstrapped, the wheel built with it, a sanity job and the deploy.
cron: "0 5 * * *"
start_date: 2026-11-01
repositories:
  - {{name: tensorflow, url: "{workspace}", branch: main}}
  - {{name: bazel, url: "{bazel_source}", branch: main}}
targets:
  - {{name: theta-knl, arch: amd64, params: {{queue: debug-cache-quad}}}}
stages:
  - {{name: sources, kind: sources, description: Both pinned.}}
  - name: wheels
    kind: wheels
    deps: [sources]
    runner: theta-cobalt
    description: Bazel from source, then the wheel.
    params:
      builder: bazel
      repo: tensorflow
      bazel:
        targets: ["//wheels:nightlybazel_wheel"]
        bootstrap: {{repo: bazel, command: [bash, ./compile.sh], binary: output/bazel}}
  - name: sanity_job
    kind: batch_job
    deps: [wheels]
    runner: theta-cobalt
    description: Imports the wheel in a job.
    params:
      nodes: 1
      walltime_minutes: 2
      expect_output: "answer 42, session ok"
      command: ["{{python}}", "-c", "import nightlybazel as n; print(f'answer {{n.answer()}}, session ok')"]
  - {{name: deploy, kind: deploy, deps: [sanity_job], runner: theta-cobalt, description: Released.}}
  - {{name: night_summary, kind: night_summary, deps: [deploy], description: Summary.}}
"""

# Bazel's own bootstrap takes an hour; this tree's compile.sh leaves a client that hands over to
# the installed Bazel, which is enough to show the stage builds with what the bootstrap left.
COMPILE_SH = """set -eu
echo "Building Bazel from scratch"
mkdir -p output
printf '#!/bin/sh\\nexec %s "$@"\\n' "$(command -v bazel)" > output/bazel
chmod +x output/bazel
echo "Build successful! Binary is here: output/bazel"
"""

Night = Callable[[str, str], tuple[NightKey, dict]]


@pytest.fixture
def night(
    catalog_nights: CatalogNights, monkeypatch: pytest.MonkeyPatch, bazel_peer: BazelPeer
) -> Iterator[Night]:
    """Runs one night of a pipeline text; every checkout's Bazel server is expunged at the end."""
    monkeypatch.setenv("NIGHTLY_BAZEL_OUTPUT_ROOT", str(bazel_peer.output_user_root))
    monkeypatch.setenv("NIGHTLY_BAZEL_JVM_ARGS", " ".join(JVM_ARGS))  # as the peer's own servers

    def run(text: str, date: str) -> tuple[NightKey, dict]:
        key, stages, _ = catalog_nights.run(text, date)
        return key, stages

    yield run
    # The stages build in the output base they share across nights; a bootstrap in the checkout's own.
    with dg.build_resources({"bazel_rbe": resources_for("local", catalog_nights.home)["bazel_rbe"]}) as built:
        bazel_rbe = built.bazel_rbe  # NIGHTLY_BAZEL_OUTPUT_ROOT resolved, as a run resolves it
    root = bazel_peer.output_user_root
    for key in catalog_nights.keys:
        for checkout in (
            p.parent for p in (_artefacts(catalog_nights.home, key) / "sources").glob("*/WORKSPACE")
        ):
            output_key = f"{key.pipeline}.{key.target}.{checkout.name}"
            if (root / "bases" / output_key).exists():
                bazel_rbe.shutdown(checkout, expunge=True, output_key=output_key)
            if (
                root / hashlib.md5(str(checkout.resolve()).encode(), usedforsecurity=False).hexdigest()
            ).exists():
                bazel_rbe.shutdown(checkout, expunge=True)


def _artefacts(home: Path, key: NightKey) -> Path:
    return home / "artefacts" / key.pipeline / key.night.isoformat() / key.target


def _manifest(home: Path, key: NightKey, stage: str) -> dict:
    return json.loads((_artefacts(home, key) / stage / "manifest.json").read_text())


def _workspace_repo(tmp_path: Path, bazel_peer: BazelPeer) -> Path:
    """The tests' Bazel workspace as an upstream repository (with the offline stand-ins' rc)."""
    repo = tmp_path / "upstream-workspace"
    shutil.copytree(Path(__file__).parent / "data" / "bazel_workspace", repo)
    for script in (repo / "tests").glob("*.sh"):
        script.chmod(0o755)
    (repo / ".bazelrc").write_text(bazel_peer.bazelrc())
    commit_folder(repo, "workspace")
    return repo


def test_wheels_built_through_rbe_install_and_a_second_night_is_served_from_the_cache(
    night: Night,
    nightly_home: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    bazel_peer: BazelPeer,
    buildgrid: BuildGrid,
) -> None:
    monkeypatch.setenv("NIGHTLY_RBE_CACHE", buildgrid.url)
    monkeypatch.setenv("NIGHTLY_RBE_INSTANCE", buildgrid.instance_name)
    text = RBE_PIPELINE.format(
        workspace=_workspace_repo(tmp_path, bazel_peer),
        targets='["//wheels:nightlybazel_wheel", "//wheels:house"]',
    )

    key, stages = night(text, "2026-11-03")

    assert {n: s.status for n, s in stages.items() if n != "night_summary"} == {
        **dict.fromkeys(["sources", "wheels", "environment"], "success"),
        "tests_multigpu": "failure",  # fail_test fails: the stage fails, the bookkeeping does not
    }, {n: s.detail for n, s in stages.items()}
    wheels = _manifest(nightly_home, key, "wheels")
    assert [Path(w).name for w in wheels["wheels"]] == [
        "nightlybazel-0.1.0-py3-none-any.whl",
        "nightlybazel_extra-0.2.0-py3-none-any.whl",
    ]
    assert wheels["builder"]["kind"] == "bazel" and wheels["builder"]["bazel_mode"] == "remote"
    assert "--compilation_mode=fastbuild" in wheels["builder"]["command"]
    python = _manifest(nightly_home, key, "environment")["python"]
    imported = subprocess.run(
        [python, "-c", "import nightlybazel, nightlybazel_extra; print(nightlybazel.answer())"],
        capture_output=True,
        text=True,
    )
    assert imported.stdout.strip() == "42", imported.stderr

    store = resources_for("local", nightly_home)["warehouse"].store()
    counts = store.suite_counts(key)["tests_multigpu"]
    # pass + flaky (passes: no marker dir here), fail_test fails; tpu, cuda-only, untagged filtered out.
    assert counts["passed"] == 2 and counts["failed"] + counts["error"] == 1, counts
    assert [c.name for c in store.failed_cases(key, "tests_multigpu")] == ["tests/fail_test"]
    assert _manifest(nightly_home, key, "tests_multigpu")["bazel_mode"] == "remote"

    # The next night checks out into a new folder but builds in the same output base: nothing
    # changed, so nothing is built again (a fresh output base is served by the remote cache: test_rbe).
    key, stages = night(text, "2026-11-04")
    assert stages["wheels"].status == "success"
    builder = _manifest(nightly_home, key, "wheels")["builder"]
    assert builder["processes"] <= 1 and builder["remote_cache_hits"] == 0, builder
    assert len(list((bazel_peer.output_user_root / "bases").glob("rbe_wheels.rocm-mi300.*"))) == 1


def test_a_failing_bazel_build_fails_the_wheels_stage_with_bazels_error(
    night: Night, tmp_path: Path, bazel_peer: BazelPeer
) -> None:
    text = RBE_PIPELINE.format(
        workspace=_workspace_repo(tmp_path, bazel_peer), targets='["//wheels:broken_wheel"]'
    )
    _, stages = night(text, "2026-11-03")
    assert stages["wheels"].status == "failure"
    assert "exited 1 (build failed)" in (stages["wheels"].detail or "")
    assert "//wheels:broken_wheel" in (stages["wheels"].detail or "")
    assert all(stages[s].status != "success" for s in ("environment", "tests_multigpu") if s in stages)


def test_theta_bootstraps_bazel_from_source_and_its_wheel_passes_the_sanity_job(
    night: Night, nightly_home: Path, tmp_path: Path, bazel_peer: BazelPeer
) -> None:
    bazel_source = tmp_path / "upstream-bazel"
    bazel_source.mkdir()
    (bazel_source / "compile.sh").write_text(COMPILE_SH)
    bazel_sha = commit_folder(bazel_source, "bazel")
    text = THETA_PIPELINE.format(workspace=_workspace_repo(tmp_path, bazel_peer), bazel_source=bazel_source)
    bazel_peer.forget_bootstraps(bazel_sha)

    key, stages = night(text, "2026-11-03")

    assert all(s.status == "success" for s in stages.values()), {n: s.detail for n, s in stages.items()}
    builder = _manifest(nightly_home, key, "wheels")["builder"]
    [bootstrapped] = (bazel_peer.output_user_root / "bootstrapped").glob(f"{bazel_sha}-*/bazel")
    assert builder["bazel_binary"] == str(bootstrapped) and builder["bazel_mode"] == "local"
    assert builder["command"].startswith(str(bootstrapped))
    assert "Build successful" in (_artefacts(nightly_home, key) / "wheels" / "bootstrap.log").read_text()
    sanity = _manifest(nightly_home, key, "sanity_job")
    assert "answer 42, session ok" in Path(sanity["stdout"]).read_text()
    release = nightly_home / "releases/theta_bazel/theta-knl"
    assert (release / "current").resolve() == (release / "2026-11-03").resolve()

    # The next night, at the same Bazel commit, builds with the Bazel bootstrapped before.
    key, stages = night(text, "2026-11-04")
    assert stages["sanity_job"].status == "success"
    assert "reused" in (_artefacts(nightly_home, key) / "wheels" / "bootstrap.log").read_text()


@pytest.mark.docker
@pytest.mark.registry
def test_the_catalogs_jax_rocm_rbe_night_runs_end_to_end(
    night: Night,
    nightly_home: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    bazel_peer: BazelPeer,
    buildgrid: BuildGrid,
    docker_engine,
    registries,
    base_image: str,
) -> None:
    """The shipped jax_rocm_rbe.yaml, with only what cannot exist here swapped: the repositories
    (the tests' workspace), the build image (pushed to the ECR-role registry first) and the wheel
    targets (the workspace's). Its suite block (//tests/..., its tag filters, 3 flaky attempts)
    is the catalog's own."""
    ecr = registries.ecr
    for name, value in {**docker_engine.env(), **ecr.role_env()}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("NIGHTLY_RBE_CACHE", buildgrid.url)
    monkeypatch.setenv("NIGHTLY_RBE_INSTANCE", buildgrid.instance_name)
    image = ecr.repository(f"e2e{secrets.token_hex(3)}/rocm/tensorflow-build:latest")
    client = docker_engine.client()
    client.images.get(base_image).tag(image)
    client.images.push(image, auth_config=ecr.auth_config)
    client.images.remove(image)

    document = read_pipeline(catalog_dir(), "jax_rocm_rbe")
    plugin = tmp_path / "upstream-rocm-jax"  # not a Bazel workspace: nothing may build or test in it
    plugin.mkdir()
    (plugin / "README.md").write_text("the ROCm plugin\n")
    urls = {"jax": str(_workspace_repo(tmp_path, bazel_peer)), "rocm_jax": str(plugin)}
    commit_folder(plugin, "plugin")
    for repository in document["repositories"]:
        repository.update(url=urls[repository["name"]], branch="main")
    stages = {stage["name"]: stage for stage in document["stages"]}
    stages["build_image"]["params"]["image"] = image
    stages["wheels"]["params"]["bazel"].update(targets=["//wheels:nightlybazel_wheel"], args=[])

    key, recorded = night(yaml.safe_dump(document, sort_keys=False), "2026-11-03")

    statuses = {name: stage.status for name, stage in recorded.items()}
    assert statuses["build_image"] == statuses["wheels"] == "success", {
        n: s.detail for n, s in recorded.items()
    }
    assert statuses["tests_multigpu"] == "failure"  # the workspace's fail_test fails, as it should
    pulled = _manifest(nightly_home, key, "build_image")
    assert pulled["repo_digest"].startswith(image.rsplit(":", 1)[0] + "@sha256:")
    assert _manifest(nightly_home, key, "wheels")["builder"]["bazel_mode"] == "remote"
    counts = resources_for("local", nightly_home)["warehouse"].store().suite_counts(key)["tests_multigpu"]
    assert counts["passed"] == 2 and counts["failed"] + counts["error"] == 1, counts
    client.close()


def test_the_catalogs_tf_theta_night_runs_end_to_end(
    night: Night, nightly_home: Path, tmp_path: Path, bazel_peer: BazelPeer
) -> None:
    """The shipped tf_theta.yaml with its own bootstrap command (`bazel build //src:bazel_nojdk`
    in the pinned "bazel" repository), sweep grid (36 points) and report. Swapped: the
    repositories (the "bazel" one is a workspace whose //src:bazel_nojdk is a client handing over
    to the installed Bazel), the wheel target and the sanity job's import."""
    bazel_source = tmp_path / "upstream-bazel"
    (bazel_source / "src").mkdir(parents=True)
    (bazel_source / "WORKSPACE").write_text('workspace(name = "io_bazel")\n')
    (bazel_source / "src" / "BUILD").write_text(
        "genrule(\n"
        '    name = "bazel_nojdk",\n'
        '    outs = ["bazel_nojdk"],\n'
        f'    cmd = "printf \'#!/bin/sh\\\\nexec {bazel_peer.binary} \\"$$@\\"\\\\n\' > $@",\n'
        "    executable = True,\n"
        ")\n"
    )
    # The bootstrap runs the catalog's plain `bazel build`: its startup options come from here.
    startup = [f"--output_user_root={bazel_peer.output_user_root}", "--max_idle_secs=300"]
    (bazel_source / ".bazelrc").write_text(
        "".join(f"startup {option}\n" for option in startup) + bazel_peer.bazelrc()
    )
    bazel_sha = commit_folder(bazel_source, "bazel")
    bazel_peer.forget_bootstraps(bazel_sha)

    document = read_pipeline(catalog_dir(), "tf_theta")
    urls = {"tensorflow": str(_workspace_repo(tmp_path, bazel_peer)), "bazel": str(bazel_source)}
    urls["benchmarks"] = urls["tensorflow"]
    for repository in document["repositories"]:
        repository.update(url=urls[repository["name"]], branch="main")
    stages = {stage["name"]: stage for stage in document["stages"]}
    stages["wheels"]["params"]["bazel"].update(targets=["//wheels:nightlybazel_wheel"], args=[])
    stages["sanity_job"]["params"]["command"] = [
        "{python}",
        "-c",
        "import nightlybazel; assert nightlybazel.answer() == 42; print('session ok')",
    ]

    key, recorded = night(yaml.safe_dump(document, sort_keys=False), "2026-11-03")

    assert all(s.status == "success" for s in recorded.values()), {n: s.detail for n, s in recorded.items()}
    builder = _manifest(nightly_home, key, "wheels")["builder"]
    assert Path(builder["bazel_binary"]).parent.name.startswith(f"{bazel_sha}-")
    bootstrap_log = (_artefacts(nightly_home, key) / "wheels" / "bootstrap.log").read_text()
    assert "//src:bazel_nojdk up-to-date" in bootstrap_log, bootstrap_log[-2000:]
    sweep = _manifest(nightly_home, key, "benchmark_sweep")
    assert len(sweep["rows"]) == 3 * 4 * 3 and all(r["status"] == "ok" for r in sweep["rows"])
    report = _manifest(nightly_home, key, "analysis_report")
    assert Path(report["pdf"]).read_bytes().startswith(b"%PDF")
