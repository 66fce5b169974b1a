"""The image path for real: build framework and runtime images on a Docker engine, push them to the
ECR role, mirror to the ACR role, pull, and run suites inside through Dagster Pipes."""

import datetime as dt
import json
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dagster as dg
import pytest

from nightly_assets.catalog.loader import load_catalog
from nightly_assets.catalog.models import Catalog
from nightly_assets.containers import checks, images
from nightly_assets.containers.registry import OciRegistry
from nightly_assets.definitions import build_definitions
from nightly_assets.demo.sample_repo import load_history
from nightly_assets.night import NightOutcome, run_night
from nightly_assets.resources import resources_for
from nightly_assets.results import NightKey
from nightly_assets_tests.catalog_files import copy_catalog, write_pipeline

pytestmark = [pytest.mark.docker, pytest.mark.registry, pytest.mark.slow]
HISTORY = load_history()

# Seeds 000 and 001 on the sample project: wheels built in a clean builder container -> framework
# image (cache, ECR) -> runtime image (ECR + ACR) -> suites inside it by markers (arm64: collect).
IMAGES_PIPELINE = """
name: images
title: Image path test pipeline
seed: "001"
description: Framework and runtime images of the sample project, tested inside.
cron: "0 8 * * *"
start_date: 2026-11-01
retention_days: 7
repositories:
  - {name: nightlysample, url: "sample:nightlysample", branch: main}
targets:
  - {name: alpha-amd64, arch: amd64, params: {framework: alpha}}
  - {name: beta-amd64, arch: amd64, params: {framework: beta}, build_args: {CUDA_VERSION: "129"}}
  - {name: alpha-arm64, arch: arm64, params: {framework: alpha}, build_args: {CUDA_VERSION: "129"}}
stages:
  - {name: sources, kind: sources, description: Pinned sample.}
  - name: wheels
    kind: wheels
    deps: [sources]
    runner: {amd64: cpu-amd-m5-4xlarge, arm64: cpu-arm-r8g-4xlarge}
    description: The wheel, built in a clean container.
    params: {builder: container}
  - name: framework_image
    kind: docker_image
    deps: [wheels]
    runner: {amd64: cpu-amd-m5-4xlarge, arm64: cpu-arm-r8g-4xlarge}
    description: Framework image, cached from last night.
    params: {role: framework, tag: "main-{framework}-framework-{arch}", push_to: [ecr], repository: sample}
  - name: runtime_image
    kind: docker_image
    deps: [framework_image]
    runner: {amd64: cpu-amd-m5-4xlarge, arm64: cpu-arm-r8g-4xlarge}
    description: Runtime image.
    params:
      role: runtime
      install_wheels: true
      repository: sample
      tags: ["nightly-{framework}-{arch}", "nightly-{framework}-{arch}-run-{run_id}"]
      push_to: [ecr, acr]
  - name: tests_unit
    kind: test_suite
    deps: [runtime_image]
    description: Unit tests in the image.
    suite:
      markers: unit
      timeout_minutes: 10
      runner: {amd64: gpu-l40-amd64, arm64: cpu-arm-r8g-4xlarge}
      collect_only_on: [arm64]
  - name: tests_e2e_gpu_1
    kind: test_suite
    deps: [runtime_image]
    description: GPU tests, collect-only without a GPU.
    suite:
      markers: e2e and gpu_1
      timeout_minutes: 10
      runner: {amd64: gpu-l40-amd64, arm64: cpu-arm-r8g-4xlarge}
      min_gpus: 1
      collect_only_on: [arm64]
  - name: night_summary
    kind: night_summary
    deps: [tests_unit, tests_e2e_gpu_1]
    description: Summary.
"""


@dataclass
class ImageNights:
    defs: dg.Definitions
    instance: dg.DagsterInstance
    catalog: Catalog
    resources: dict
    home: Path
    namespace: str
    catalog_path: Path

    def run(self, night: str, target: str = "alpha-amd64", expect_success: bool = True) -> NightOutcome:
        key = NightKey("images", dt.date.fromisoformat(night), target)
        outcome = run_night(self.defs, self.instance, self.catalog, key, self.resources)
        if expect_success:
            failed = [f"{s.stage}: {s.detail}" for s in self.store.stages(key) if s.status != "success"]
            assert outcome.succeeded, "\n".join(failed)
        return outcome

    def rebuild(self) -> None:
        """Definitions and resources again, from the environment as the test changed it."""
        self.defs = build_definitions(self.catalog_path)
        self.resources = resources_for("local", self.home)

    @property
    def store(self):
        return self.resources["warehouse"].store()

    def manifest(self, night: str, target: str, stage: str) -> dict:
        path = self.home / "artefacts" / "images" / night / target / stage / "manifest.json"
        return json.loads(path.read_text())

    def resolved(self, name: str) -> Any:
        """A resource with its `{env: NAME}` settings read, as a run gets it."""
        with dg.build_resources({name: self.resources[name]}) as built:
            return getattr(built, name)

    def registry(self, role: str) -> OciRegistry:
        return self.resolved("registries").registry(role)

    def metadata(self, run: dg.DagsterRun, stage: str) -> dict:
        for record in self.instance.get_records_for_run(run.run_id).records:
            event = record.event_log_entry.dagster_event
            if event and event.is_step_materialization:
                mat = event.step_materialization_data.materialization
                if mat.asset_key == dg.AssetKey(["images", stage]):
                    return {k: v.value for k, v in mat.metadata.items()}
        raise AssertionError(f"no materialization of {stage} in run {run.run_id}")


@pytest.fixture
def image_nights(nightly_home, tmp_path, monkeypatch, docker_engine, base_image, registries):
    catalog = copy_catalog(tmp_path / "catalog")
    write_pipeline(catalog, IMAGES_PIPELINE)
    namespace = f"t{secrets.token_hex(4)}/"  # the session's registries are shared between tests
    monkeypatch.setenv("DOCKER_HOST", docker_engine.host)
    for registry in registries:
        for name, value in registry.role_env(namespace).items():
            monkeypatch.setenv(name, value)
    (tmp_path / "dagster_home").mkdir()
    with dg.instance_for_test(temp_dir=str(tmp_path / "dagster_home")) as instance:
        yield ImageNights(
            build_definitions(catalog),
            instance,
            load_catalog(catalog),
            resources_for("local", nightly_home),
            nightly_home,
            namespace,
            catalog,
        )


def test_two_targets_build_push_mirror_and_test_inside_the_image(image_nights, registries, base_image):
    repo = f"{image_nights.namespace}sample"
    ecr, acr = image_nights.registry("ecr"), image_nights.registry("acr")
    runs = []
    for target, framework in (("alpha-amd64", "alpha"), ("beta-amd64", "beta")):
        outcome = image_nights.run("2026-11-03", target)
        runs.append(outcome.run)
        runtime = image_nights.manifest("2026-11-03", target, "runtime_image")
        run_tag = f"nightly-{framework}-amd64-run-{outcome.run.run_id[:8]}"
        for tag in (f"nightly-{framework}-amd64", run_tag):
            assert ecr.manifest_digest(repo, tag) == runtime["digest"]
            assert acr.manifest_digest(repo, tag) == runtime["digest"]
        assert ecr.missing_blobs(repo, runtime["digest"]) == []
        assert acr.missing_blobs(repo, runtime["digest"]) == []
        framework_tag = f"main-{framework}-framework-amd64"
        assert ecr.manifest_digest(repo, framework_tag) is not None
        assert acr.manifest_digest(repo, framework_tag) is None  # ACR gets the runtime image only
        counts = (
            image_nights.resources["warehouse"]
            .store()
            .suite_counts(NightKey("images", dt.date(2026, 11, 3), target))
        )
        assert counts["tests_unit"]["passed"] == counts["tests_unit"]["total"] == HISTORY[0].expect["unit"]
        # No GPU on this runner's host: the GPU suite is only collected (seed 001's dry run).
        assert counts["tests_e2e_gpu_1"]["collected"] == HISTORY[0].expect["e2e_gpu_1"]
        assert counts["tests_e2e_gpu_1"]["passed"] == 0
        junit = image_nights.home / "artefacts/images/2026-11-03" / target / "tests_unit/out/junit.xml"
        assert junit.is_file()
        meta = image_nights.metadata(outcome.run, "runtime_image")
        assert meta["digest"] == runtime["digest"] and meta["architecture"] == "amd64"
        wheels = image_nights.manifest("2026-11-03", target, "wheels")
        assert wheels["builder"]["kind"] == "container" and wheels["builder"]["platform"] == "linux/amd64"
        base_id = image_nights.resources["docker_pool"].client("local").images.get(base_image).id
        assert wheels["builder"]["image_id"] == base_id
    checks_run = image_nights.instance.event_log_storage.get_asset_check_execution_history(
        dg.AssetCheckKey(dg.AssetKey(["images", "runtime_image"]), checks.IMAGE_IN_REGISTRIES), limit=10
    )
    assert len(checks_run) == 2 and all(c.evaluation.passed for c in checks_run if c.evaluation)
    _assert_no_credentials(image_nights, [r.password for r in registries], runs)
    # The same check, asked again after the ACR copy disappeared, fails and names the registry.
    runtime = image_nights.manifest("2026-11-03", "alpha-amd64", "runtime_image")
    key = dg.AssetKey(["images", "runtime_image"])
    acr.delete_manifest(repo, runtime["digest"])
    result = checks.image_in_registries(
        key, image_nights.resolved("registries"), runtime["published"], runtime["digest"]
    )
    assert not result.passed
    assert "acr" in (result.description or "") and "missing" in (result.description or "")


def _assert_no_credentials(image_nights, passwords: list[str], runs: list[dg.DagsterRun]) -> None:
    """Neither the event logs, the run configs nor any artefact (logs, manifests) holds a password."""
    for run in runs:
        assert not any(p in json.dumps(run.run_config, default=str) for p in passwords)
        for record in image_nights.instance.get_records_for_run(run.run_id).records:
            text = str(record.event_log_entry)
            assert not any(p in text for p in passwords)
    for path in (image_nights.home / "artefacts").rglob("*"):
        if path.is_file() and path.stat().st_size < 5_000_000:
            content = path.read_bytes()
            assert not any(p.encode() in content for p in passwords), path


def test_second_night_builds_the_framework_from_cache_and_expires_old_run_tags(image_nights, monkeypatch):
    repo = f"{image_nights.namespace}sample"
    ecr, acr = image_nights.registry("ecr"), image_nights.registry("acr")
    first = image_nights.run("2026-11-03")
    assert first.succeeded
    old_run_tag = f"nightly-alpha-amd64-run-{first.run.run_id[:8]}"
    nine_days_on = images.now() + dt.timedelta(days=9)  # past the 7-day retention
    monkeypatch.setattr(images, "now", lambda: nine_days_on)
    later = image_nights.run("2026-11-12")
    assert later.succeeded
    meta = image_nights.metadata(later.run, "framework_image")
    assert meta["cache_hit_share"] == 1.0, meta["cached_steps"]
    # Last night's framework image, as pushed to ECR, is one of the cache sources.
    assert f"{image_nights.registry('ecr').host}/{repo}:main-alpha-framework-amd64" in meta["cache_from"]
    for registry in (ecr, acr):
        tags = registry.tags(repo)
        assert old_run_tag not in tags, registry.name
        assert f"nightly-alpha-amd64-run-{later.run.run_id[:8]}" in tags
    assert "nightly-alpha-amd64" in ecr.tags(repo)


def test_tests_pull_the_image_from_the_registry_when_the_engine_lacks_it(image_nights):
    assert image_nights.run("2026-11-03").succeeded
    runtime = image_nights.manifest("2026-11-03", "alpha-amd64", "runtime_image")
    client = image_nights.resources["docker_pool"].client("gpu-l40-amd64")
    client.images.remove(runtime["image_id"], force=True)
    key = dg.AssetKey(["images", "tests_unit"])
    result = dg.materialize(
        [image_nights.defs.get_assets_def(key)],
        partition_key="2026-11-03|alpha-amd64",
        resources=image_nights.resources,
        instance=image_nights.instance,
    )
    assert result.success
    assert client.images.get(runtime["reference"]).id == runtime["image_id"]


def test_a_failed_image_build_starts_no_test_container(image_nights, docker_engine):
    broken = IMAGES_PIPELINE.replace(
        "push_to: [ecr], repository: sample}",
        "push_to: [ecr], repository: sample, base_image: nightly-base/none:0}",
    )
    assert broken != IMAGES_PIPELINE
    write_pipeline(image_nights.catalog_path, broken)
    image_nights.defs = build_definitions(image_nights.catalog_path)
    client = docker_engine.client()
    before = {c.id for c in client.containers.list(all=True)}
    outcome = image_nights.run("2026-11-03", expect_success=False)
    assert not outcome.succeeded
    key = NightKey("images", dt.date(2026, 11, 3), "alpha-amd64")
    stages = {s.stage: s.status for s in image_nights.resources["warehouse"].store().stages(key)}
    assert stages["framework_image"] == "failure"
    assert "tests_unit" not in stages or stages["tests_unit"] != "success"
    assert not {c.id for c in client.containers.list(all=True)} - before  # none left (the engine is shared)


def test_mirror_through_500_and_429_still_lands_a_whole_image(
    image_nights, registries, faulty_acr, monkeypatch
):
    monkeypatch.setenv("NIGHTLY_REGISTRY_ACR_URL", faulty_acr.url)
    monkeypatch.setenv("NIGHTLY_REGISTRY_BACKOFF_S", "0.05")
    image_nights.rebuild()
    faulty_acr.fail("POST", r"/v2/.+/blobs/uploads/", [500])
    faulty_acr.fail("PUT", r"/v2/.+/blobs/uploads/.+", [429], retry_after="1")
    faulty_acr.fail("PUT", r"/v2/.+/blobs/uploads/.+", [502])
    faulty_acr.fail("HEAD", r"/v2/.+/blobs/.+", [503])
    faulty_acr.fail("PUT", r"/v2/.+/manifests/.+", [500, 429])
    image_nights.run("2026-11-03")
    assert faulty_acr.pending_faults() == 0
    assert sorted(r.status for r in faulty_acr.log if r.injected) == [429, 429, 500, 500, 502, 503]
    runtime = image_nights.manifest("2026-11-03", "alpha-amd64", "runtime_image")
    repo = f"{image_nights.namespace}sample"
    direct = _straight_to(registries.acr)
    assert direct.manifest_digest(repo, "nightly-alpha-amd64") == runtime["digest"]
    assert direct.missing_blobs(repo, runtime["digest"]) == []


def test_a_registry_that_keeps_failing_gets_no_partial_tag(image_nights, registries, faulty_acr, monkeypatch):
    monkeypatch.setenv("NIGHTLY_REGISTRY_ACR_URL", faulty_acr.url)
    monkeypatch.setenv("NIGHTLY_REGISTRY_BACKOFF_S", "0.01")
    image_nights.rebuild()
    faulty_acr.fail("PUT", r"/v2/.+/blobs/uploads/.+", [500] * 200)
    outcome = image_nights.run("2026-11-03", expect_success=False)
    assert not outcome.succeeded
    key = NightKey("images", dt.date(2026, 11, 3), "alpha-amd64")
    stages = {s.stage: s for s in image_nights.store.stages(key)}
    assert stages["runtime_image"].status == "failure" and "acr" in (stages["runtime_image"].detail or "")
    assert "tests_unit" not in stages
    direct = _straight_to(registries.acr)
    assert direct.tags(f"{image_nights.namespace}sample") == []  # nothing tagged, not even by digest


def test_arm64_targets_build_arm64_images_and_only_collect(
    image_nights, docker_engine, arm64_base_image, tmp_path, monkeypatch
):
    # The arm64 runner is a host that builds linux/arm64; here the same engine, with a stand-in
    # arm64 base image (this amd64 machine has no emulator; see peers/docker.py).
    pool = tmp_path / "runner-pool.yaml"
    pool.write_text(
        f"default: {{docker_host: '{docker_engine.host}'}}\n"
        f"hosts:\n  cpu-arm-r8g-4xlarge: {{docker_host: '{docker_engine.host}', platforms: [linux/arm64]}}\n"
    )
    monkeypatch.setenv("NIGHTLY_RUNNER_POOL", str(pool))
    monkeypatch.setenv("NIGHTLY_BASE_IMAGE_ARM64", arm64_base_image)
    image_nights.rebuild()
    outcome = image_nights.run("2026-11-03", "alpha-arm64")
    repo = f"{image_nights.namespace}sample"
    runtime = image_nights.manifest("2026-11-03", "alpha-arm64", "runtime_image")
    assert runtime["build"]["architecture"] == "arm64"
    assert (
        image_nights.manifest("2026-11-03", "alpha-arm64", "wheels")["builder"]["platform"] == "linux/arm64"
    )
    config = image_nights.registry("ecr").image_config(repo, "nightly-alpha-arm64")
    assert config["architecture"] == "arm64"
    assert image_nights.registry("acr").manifest_digest(repo, "nightly-alpha-arm64") == runtime["digest"]
    counts = image_nights.store.suite_counts(NightKey("images", dt.date(2026, 11, 3), "alpha-arm64"))
    assert counts["tests_unit"]["collected"] == HISTORY[0].expect["unit"]
    assert counts["tests_e2e_gpu_1"]["collected"] == HISTORY[0].expect["e2e_gpu_1"]
    assert counts["tests_unit"]["passed"] == counts["tests_e2e_gpu_1"]["passed"] == 0
    assert outcome.succeeded


def test_demo_night_runs_in_containers_when_an_engine_is_there(
    nightly_home, tmp_path, monkeypatch, docker_engine, base_image
):
    monkeypatch.setenv("DOCKER_HOST", docker_engine.host)
    (tmp_path / "dagster_home").mkdir()
    with dg.instance_for_test(temp_dir=str(tmp_path / "dagster_home")) as instance:
        resources = resources_for("local", nightly_home)
        key = NightKey("demo", dt.date(2026, 11, 3), "cpu")
        outcome = run_night(build_definitions(), instance, load_catalog(), key, resources)
        assert outcome.succeeded
    night = nightly_home / "artefacts/demo/2026-11-03/cpu"
    image = json.loads((night / "image/manifest.json").read_text())
    assert image["mode"] == "image" and image["build"]["architecture"] == "amd64"
    # Read in the image: no framework there, and the night's own wheel is never one.
    assert image["frameworks"] == {} and "frameworks_unread" not in image, image.get("frameworks_unread")
    counts = resources["warehouse"].store().suite_counts(key)
    assert counts["tests_unit"]["passed"] == counts["tests_unit"]["total"] == HISTORY[0].expect["unit"] + 1
    assert counts["tests_integration"]["passed"] == HISTORY[0].expect["integration"]
    assert counts["tests_e2e_gpu_1"]["collected"] == HISTORY[0].expect["e2e_gpu_1"]
    assert (night / "tests_unit/out/junit.xml").is_file()
    bench = json.loads((night / "benchmarks/manifest.json").read_text())["benchmarks"]
    assert bench and all(v["value"] > 0 for v in bench.values())
    assert (night / "benchmarks/out/timing.json").is_file()  # measured inside the image


def _straight_to(registry) -> OciRegistry:
    """A client for the registry itself, not the fault-injecting proxy in front of it."""
    return OciRegistry(
        registry.name, registry.url, registry.username, registry.password, verify=str(registry.ca_cert)
    )


# Seed 000's first stage: the pre-built build image pulled onto the GPU host, pinned by digest.
PULL_PIPELINE = """
name: pulled
title: Image pull test pipeline
seed: "000"
description: A pre-built image pulled from the ECR role's registry.
cron: "0 2 * * *"
start_date: 2026-11-01
repositories:
  - {{name: nightlysample, url: "sample:nightlysample", branch: main}}
targets:
  - {{name: rocm-mi300, arch: amd64}}
stages:
  - {{name: sources, kind: sources, description: Pinned sample.}}
  - name: build_image
    kind: image_pull
    deps: [sources]
    runner: rocm-mi300-8gpu
    description: The pre-built image.
    params: {{image: "{image}"}}
  - {{name: night_summary, kind: night_summary, deps: [build_image], description: Summary.}}
"""


def test_an_image_pull_stage_pulls_with_the_registrys_credentials_and_pins_the_digest(
    image_nights, registries, base_image
):
    client = image_nights.resources["docker_pool"].client("rocm-mi300-8gpu")
    reference = registries.ecr.repository(f"{image_nights.namespace}rocm/tensorflow-build:latest")
    client.images.get(base_image).tag(reference)
    client.images.push(reference, auth_config=registries.ecr.auth_config)
    client.images.remove(reference)  # the host lacks it: the stage must pull it, logged in

    def night(image: str, date: str) -> dict:
        write_pipeline(image_nights.catalog_path, PULL_PIPELINE.format(image=image))
        catalog = load_catalog(image_nights.catalog_path)
        key = NightKey("pulled", dt.date.fromisoformat(date), "rocm-mi300")
        run_night(
            build_definitions(image_nights.catalog_path),
            image_nights.instance,
            catalog,
            key,
            image_nights.resources,
        )
        return {s.stage: s for s in image_nights.store.stages(key)}

    stages = night(reference, "2026-11-03")

    assert stages["build_image"].status == "success", stages["build_image"].detail
    manifest = json.loads(
        (image_nights.home / "artefacts/pulled/2026-11-03/rocm-mi300/build_image/manifest.json").read_text()
    )
    repository = reference.rsplit(":", 1)[0]
    assert manifest["repo_digest"].startswith(f"{repository}@sha256:") and manifest["registry_role"] == "ecr"
    assert client.images.get(reference).id == manifest["image_id"]
    assert stages["build_image"].artefact == manifest["repo_digest"]

    missing = night(f"{repository}:no-such-tag", "2026-11-04")["build_image"]
    assert missing.status == "failure"
    assert f"pull of {repository}:no-such-tag failed" in (missing.detail or "")
    client.close()
