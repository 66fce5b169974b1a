"""Runner kinds as execution backends: one per kind, what each supports agrees with what the
catalog lets a stage name, and work a backend cannot do is refused with the stage and runner named.

The backends' real work (pytest here and in the image, Bazel, the TPU VM, the container build) runs
in the pipeline tests against their peers: test_demo_night, test_bazel_stages, test_tpu_pipeline,
test_container_runs, test_tf_theta.
"""

import datetime as dt
import typing
from pathlib import Path

import pytest

from nightly_assets.catalog.loader import BUILTIN_CATALOG_DIR, load_catalog
from nightly_assets.manifests import EnvironmentManifest
from nightly_assets.partitions import pipeline_partitions
from nightly_assets.results import NightKey
from nightly_assets.runners import backend, backends, stage_backends
from nightly_assets.runners.protocol import StageWork
from nightly_assets.stage_kinds import stage_kind
from nightly_assets.stage_kinds.spec import ORCHESTRATOR, RunnerKind
from nightly_assets.stage_kinds.wheels import WheelsParams
from nightly_assets.stages import StageNotAvailable, StageRun, StageSpec


@pytest.fixture(scope="module")
def catalog():
    return load_catalog(BUILTIN_CATALOG_DIR)


def spec_of(catalog, pipeline: str, stage: str) -> StageSpec:
    p = catalog.pipelines[pipeline]
    return StageSpec(catalog, BUILTIN_CATALOG_DIR, p, p.stage(stage), pipeline_partitions(p))


def work_on(spec: StageSpec, runner: str, tmp_path: Path, python: str | None = None) -> StageWork:
    target = spec.pipeline.targets[0]
    key = NightKey(spec.pipeline.name, dt.date(2026, 11, 23), target.name)
    run = StageRun(key, target, runner, spec.catalog.runners[runner], tmp_path)
    environment = EnvironmentManifest(python=python) if python else None
    return StageWork(context=None, spec=spec, run=run, environment=environment)  # type: ignore[arg-type]


def test_every_runner_kind_has_its_backend():
    assert set(backends()) == set(typing.get_args(RunnerKind))
    for kind, runner_backend in backends().items():
        assert runner_backend.kind == kind
        assert runner_backend.supports, kind


@pytest.mark.parametrize(
    ("stage_kind_name", "capability"),
    [("test_suite", "suite"), ("wheels", "wheels"), ("benchmarks", "command")],
)
def test_a_kind_accepts_only_runners_whose_backend_does_its_work(stage_kind_name, capability):
    """The catalog refuses at load what no backend could run at night."""
    accepted = stage_kind(stage_kind_name).runners - {ORCHESTRATOR}
    assert accepted, stage_kind_name
    for kind in accepted:
        assert capability in backend(kind).supports, (stage_kind_name, kind)


def test_a_stage_asks_for_the_resources_of_its_backends_only(catalog):
    wheels = spec_of(catalog, "jax_rocm_rbe", "wheels")  # Bazel through remote execution
    assert [b.kind for b in stage_backends(wheels)] == ["rbe"]
    assert backend("rbe").resource_keys(wheels, "wheels") == {"bazel_rbe"}
    pip = spec_of(catalog, "demo", "wheels")
    assert backend("local").resource_keys(pip, "wheels") == {"builder"}
    image_suite = spec_of(catalog, "demo", "tests_unit")  # a local runner, the night's image
    assert backend("local").resource_keys(image_suite, "suite") == {
        "test_runner",
        "docker_pool",
        "registries",
    }
    venv_suite = spec_of(catalog, "torch_spyre", "tests_unit")
    assert backend("local").resource_keys(venv_suite, "suite") == {"test_runner"}
    aiu_suite = spec_of(catalog, "torch_spyre", "tests_device")  # pods; the Docker stand-in locally
    assert [b.kind for b in stage_backends(aiu_suite)] == ["kubernetes"]
    assert backend("kubernetes").resource_keys(aiu_suite, "suite") == {
        "kubernetes",
        "docker_pool",
        "registries",
    }
    tpu_suite = spec_of(catalog, "tpu", "tests_tpu")
    assert backend("tpu_vm").resource_keys(tpu_suite, "suite") == {"tpu_vms"}
    assert {c.name for c in backend("tpu_vm").check_specs(tpu_suite, "suite")} == {
        "tpu_vm_deleted",
        "cost_within_budget",
    }
    assert backend("local").check_specs(image_suite, "suite") == []


def test_work_a_backend_cannot_do_is_refused_naming_stage_and_runner(catalog, tmp_path):
    wheels = spec_of(catalog, "demo", "wheels")
    with pytest.raises(StageNotAvailable) as refused:
        backend("tpu_vm").build_wheels(work_on(wheels, "tpu-v6e", tmp_path), wheels.params(WheelsParams))
    assert str(refused.value) == "demo/wheels: a wheel build cannot run on 'tpu-v6e' (tpu_vm)"

    suite = spec_of(catalog, "torch_spyre", "tests_device")
    venv = "/usr/bin/python3"
    with pytest.raises(StageNotAvailable) as refused:
        backend("docker").run_suite(work_on(suite, "gpu-l40-amd64", tmp_path, venv))
    assert str(refused.value) == (
        "torch_spyre/tests_device: a suite outside an image cannot run on 'gpu-l40-amd64' (docker); "
        "name a local runner"
    )
    with pytest.raises(StageNotAvailable, match="a command outside an image cannot run on 'gpu-l40-amd64'"):
        backend("docker").run_command(
            work_on(suite, "gpu-l40-amd64", tmp_path, venv), ["true"], "out.json", 10
        )
    with pytest.raises(StageNotAvailable) as refused:
        backend("kubernetes").run_suite(work_on(suite, "spyre-aiu", tmp_path, venv))
    assert str(refused.value) == (
        "torch_spyre/tests_device: a suite outside an image cannot run on 'spyre-aiu' (kubernetes); "
        "a pod runs the night's image"
    )
    with pytest.raises(StageNotAvailable, match="a wheel build cannot run on 'spyre-aiu' \\(kubernetes\\)"):
        backend("kubernetes").build_wheels(work_on(suite, "spyre-aiu", tmp_path), WheelsParams())
    image = EnvironmentManifest(
        mode="image", python="python3", rootdir="/w", local_tag="x:1", reference="x:1"
    )
    in_image = StageWork(
        context=None, spec=suite, run=work_on(suite, "theta-cobalt", tmp_path).run, environment=image
    )  # type: ignore[arg-type]
    with pytest.raises(StageNotAvailable) as refused:
        backend("batch").run_suite(in_image)
    assert str(refused.value) == (
        "torch_spyre/tests_device: a suite in an image cannot run on 'theta-cobalt' (batch); "
        "a batch job runs the night's virtualenv: use an environment stage"
    )


def test_the_local_backend_runs_a_command_and_returns_its_output(catalog, tmp_path):
    """A command on this host: `python` is the environment's, `{output}` the file it writes."""
    import sys

    bench = spec_of(catalog, "demo", "benchmarks")
    work = work_on(bench, "local", tmp_path, sys.executable)
    script = "import sys, json; json.dump({'ok': 1}, open(sys.argv[1], 'w'))"
    output = backend("local").run_command(work, ["python", "-c", script, "{output}"], "timing.json", 60)
    assert output == tmp_path / "timing.json"
    assert output.read_text() == '{"ok": 1}'
