"""The docker runner kind: suites and commands in the night's image through Dagster Pipes, and
wheels in a clean builder container, on the runner label's Docker host."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nightly_assets.artefacts.resources import MissingArtefactError
from nightly_assets.builds.wheel_params import WheelsParams
from nightly_assets.containers.resources import ContainerRegistriesResource, DockerRunnerPoolResource
from nightly_assets.devices.facts import DeviceFacts
from nightly_assets.manifests import EnvironmentManifest
from nightly_assets.process import CommandError
from nightly_assets.results import TestCase, TestReport
from nightly_assets.runners.protocol import (
    BuiltWheels,
    Capability,
    RunnerBackend,
    StageWork,
    SuiteOutcome,
    rerun_selection,
    shard_history,
    suite_selection,
)
from nightly_assets.shards.execute import ShardJob, ShardLost
from nightly_assets.shards.suite import ShardedRun, run_sharded
from nightly_assets.stages import StageSpec
from nightly_assets.testing.confirm import Rerunner, pytest_node_id
from nightly_assets.testing.junit import parse_junit
from nightly_assets.testing.pytest_output import parse_collect_only
from nightly_assets.testing.resources import TestRunError, usable
from nightly_assets.testing.suite_params import TestSuiteParams

if TYPE_CHECKING:  # the Docker SDK and dagster-docker are for a run: loading the code location skips them
    import docker  # type: ignore[import-untyped]

    from nightly_assets.containers.runner import SuiteRun

IMAGE_RESOURCES = {"docker_pool", "registries"}
# Runs a suite (pytest_args, collect_only) or a program in the night's image: timeout_s, env.
RunIn = Callable[..., "SuiteRun"]


class ImageNotAvailable(RuntimeError):
    """The stage's image is neither on the runner's engine nor pullable from its registry."""


class DockerBackend(RunnerBackend):
    kind = "docker"
    supports = frozenset({"suite", "wheels", "command"})

    def resource_keys(self, spec: StageSpec, capability: Capability) -> set[str]:
        return {"docker_pool"} if capability == "wheels" else set(IMAGE_RESOURCES)

    def run_suite(self, work: StageWork) -> SuiteOutcome:
        if not work.in_image:
            raise self.unsupported(work, "a suite outside an image", "name a local runner")
        run_in = functools.partial(run_in_image, work)
        pool: DockerRunnerPoolResource = work.resources.docker_pool
        _record_devices(work)
        gpus = pool.devices(work.label).count
        suite = work.spec.stage.suite
        engines = pool.host(work.label).engines()
        sharded = (
            image_shards(work, gpus, run_in, engines=engines) if suite is not None and suite.sharded else None
        )
        report = sharded.report if sharded is not None else image_suite(work, gpus, run_in)
        # Unsharded, the suite ran on the label's first engine; sharded, on each in turn.
        rerunner = image_rerunner(work, run_in, engines=engines, suite_engine=None if sharded else 0)
        return SuiteOutcome(report, rerunner=rerunner, shards=sharded)

    def run_command(self, work: StageWork, argv: list[str], output: str, timeout_s: float) -> Path:
        if not work.in_image:
            raise self.unsupported(work, "a command outside an image", "name a local runner")
        return command_in_image(work, argv, output, timeout_s)

    def gpu_count(self, work: StageWork) -> int:
        pool: DockerRunnerPoolResource = work.resources.docker_pool
        return pool.devices(work.label).count

    def build_wheels(self, work: StageWork, params: WheelsParams) -> BuiltWheels:
        """Wheels from a fresh container of the builder image on the runner's Docker host."""
        from nightly_assets.containers.wheels import build_wheels_in_container

        pool: DockerRunnerPoolResource = work.resources.docker_pool
        run = work.run
        pinned = work.spec.pinned_repo(work.artefacts, run.key)
        src = Path(pinned.path)
        image = params.builder_image or pool.base_image_for(run.target.arch)
        platform = pool.platform_for(run.runner_name, run.target.arch)
        client = pool.client(run.runner_name)
        work.context.log.info(f"building wheels of {src.name} in {image} ({platform}) on '{run.runner_name}'")
        try:
            built = build_wheels_in_container(
                client,
                image=image,
                python=params.builder_python,
                src=src,
                out=run.workdir / "dist",
                log=run.workdir / "build.log",
                platform=platform,
                timeout_s=pool.build_timeout_s,
                env=pinned.build_env,
            )
        finally:
            client.close()
        return BuiltWheels(
            built.wheels,
            {
                "image": image,
                "image_id": built.image_id,
                "platform": platform,
                "duration_s": round(built.duration_s, 2),
            },
        )


def suite_env(work: StageWork) -> dict[str, str]:
    """The suite's `env` with the target's values filled in ({arch}, {target}, its params), and the
    devices the target expects."""
    run = work.run
    variables = {"arch": run.target.arch, "target": run.target.name, **run.target.params}
    env = {k: str(v).format(**variables) for k, v in work.spec.params(TestSuiteParams).env.items()}
    env["NIGHTLY_EXPECTED_DEVICES"] = str(run.target.devices)
    return env


def _record_devices(work: StageWork) -> None:
    """What the container gets, as the runner pool declares it (a remote host's cards are not
    probed), with the image's framework builds: enough to key its results' baselines."""
    pool: DockerRunnerPoolResource = work.resources.docker_pool
    spec = pool.devices(work.label)
    vendor = spec.vendor if spec.count and spec.vendor in ("nvidia", "amd") else "none"
    facts = DeviceFacts(
        vendor=vendor, count=spec.count if vendor != "none" else 0, frameworks=work.env.frameworks
    )
    work.run.manifest["devices"] = facts.model_dump()


def image_suite(work: StageWork, gpus: int, run_in: RunIn) -> TestReport:
    """The suite by `run_in` (a container here, a pod for the kubernetes kind): pytest, or
    collect-only where the runner has fewer than the suite's `min_gpus`, its JUnit parsed."""
    suite = work.spec.stage.suite
    assert suite is not None
    run, name = work.run, work.spec.stage.name
    args, collect_only = suite_selection(work, gpus)
    env = suite_env(work)
    work.context.log.info(
        f"{name}: {'collect-only' if collect_only else 'pytest'} {' '.join(args)} in the image "
        f"({run.target.arch}, {gpus} GPU(s) on '{work.label}', suite needs {suite.min_gpus})"
    )
    result = run_in(
        pytest_args=args,
        collect_only=collect_only,
        timeout_s=suite.timeout_minutes * 60,
        env=env,
    )
    log = result.out_dir / "output.log"
    run.published.append(log)
    output = log.read_text(errors="replace") if log.is_file() else ""
    tail = "\n".join(output.splitlines()[-30:])
    if result.timed_out:
        raise TestRunError(
            f"{name}: pytest in the image timed out after {suite.timeout_minutes} min; last output:\n{tail}"
        )
    try:
        usable(result.returncode, tail, result.out_dir / "junit.xml", collect_only=collect_only)
    except TestRunError as exc:
        raise TestRunError(f"{name}: in the image: {exc}") from None
    if collect_only:
        report = parse_collect_only(output, name, run.runner_name)
    else:
        report = parse_junit(result.out_dir / "junit.xml", name, run.runner_name)
    work.context.log.info(f"{name}: {report.counts()}")
    return report


def image_shards(
    work: StageWork,
    gpus: int,
    run_in: RunIn,
    *,
    engines: Sequence[str | None] | None = None,
    lost: tuple[type[Exception], ...] = (),
    cards_bound: bool = True,
) -> ShardedRun | None:
    """The suite in shards, each a container (or pod) of the night's image at once (as many as the
    runner's GPUs allow a GPU suite), planned from the tests collected in the image; None where it
    only collects (too few GPUs, a collect-only arch) or collection failed: then it runs unsharded.
    `engines`: the Docker hosts shards take in turn (a cluster places pods itself); `lost`: the
    errors of `run_in` that mean the shard's container or pod was lost, beside a container's;
    `cards_bound`: False where each shard asks for its own cards (a pod: the cluster holds it
    pending until a node has them), so `gpus` does not bound how many run at once."""
    suite = work.spec.stage.suite
    assert suite is not None
    run, name = work.run, work.spec.stage.name
    args, collect_only = suite_selection(work, gpus)
    if collect_only:
        return None
    timeout_s, env = suite.timeout_minutes * 60, suite_env(work)
    collection = run_in(
        pytest_args=args, collect_only=True, timeout_s=timeout_s, env=env, out_dir=run.workdir / "collect"
    )
    log = collection.out_dir / "output.log"
    output = log.read_text(errors="replace") if log.is_file() else ""
    if collection.timed_out or collection.returncode not in (0, 5):
        work.context.log.warning(
            f"{name}: collection in the image failed: run unsharded, so the report shows why"
        )
        return None
    collected = [c.node_id for c in parse_collect_only(output, name, run.runner_name).cases]

    def run_one(job: ShardJob) -> Path:
        from nightly_assets.containers.runner import ContainerRunError

        lost_errors: tuple[type[Exception], ...] = (ContainerRunError, *lost)
        place: dict[str, Any] = {}
        if engines:  # shards take the label's engines in turn; a re-run goes to the next (another host)
            place["engine"] = (job.shard.index - 1 + job.attempt - 1) % len(engines)
            job.notes["engine"] = engines[place["engine"]] or "DOCKER_HOST"
        try:
            result = run_in(
                pytest_args=rerun_selection(work, list(job.shard.units)),
                collect_only=False,
                timeout_s=timeout_s,
                env=env,
                out_dir=run.workdir / job.name,
                on_stop=job.on_stop,
                **place,
            )
        except lost_errors as exc:  # killed, evicted, or gone before it reported
            raise ShardLost(str(exc).splitlines()[0]) from None
        job.notes.update(result.where())
        junit, log = result.out_dir / "junit.xml", result.out_dir / "output.log"
        run.published.append(log)
        if result.timed_out:
            raise ShardLost(f"pytest in the image timed out after {suite.timeout_minutes} min")
        tail = log.read_text(errors="replace")[-3000:] if log.is_file() else ""
        try:
            usable(result.returncode, tail, junit)
        except TestRunError as exc:
            raise ShardLost(str(exc).splitlines()[0]) from None
        if not junit.is_file():
            raise ShardLost("pytest in the image wrote no JUnit report")
        return junit

    return run_sharded(
        suite,
        name,
        run.runner_name,
        collected,
        shard_history(work),
        run_one,
        gpus=gpus if cards_bound else None,
        workdir=run.workdir,
        log=work.context.log.info,
    )


def image_rerunner(
    work: StageWork,
    run_in: RunIn,
    *,
    engines: Sequence[str | None] | None = None,
    suite_engine: int | None = None,
) -> Rerunner:
    """Failing tests re-run by node id by `run_in` (a container, a pod) of the night's image, with
    the suite's variables; each round's outputs in confirm-<round>/. The image holds the tests at
    their paths in the checkout of the image stage's repository (recipes.py), so that checkout
    here names their files: read only when a test fails (a suite may be materialized alone).
    `engines`: the label's Docker hosts; round N goes N hosts on from `suite_engine` (the one the
    suite ran on), so the first re-run is on another host where the label has more than one."""
    run, name, spec = work.run, work.spec.stage.name, work.spec

    @functools.cache
    def checkout() -> Path | None:
        image_stage = spec.upstream_stage("docker_image")
        repo = spec.pipeline.repo_of(spec.pipeline.stage(image_stage)) if image_stage else None
        try:
            return Path(spec.pinned_repo(work.artefacts, run.key, repo).path)
        except MissingArtefactError as exc:
            work.context.log.warning(f"{name}: failing tests cannot be named for a re-run: {exc}")
            return None

    def address(case: TestCase) -> str | None:
        root = checkout()
        return pytest_node_id(case, root) if root is not None else None

    many = engines is not None and len(engines) > 1

    def engine_of(number: int) -> int:
        return ((suite_engine or 0) + number) % len(engines) if engines else 0

    def host_of(number: int) -> str:
        assert engines is not None
        return engines[engine_of(number)] or "DOCKER_HOST"

    def run_round(node_ids: list[str], number: int, runs: int, timeout_s: float) -> TestReport:
        assert runs == 1  # pytest re-runs round by round
        out_dir = run.workdir / f"confirm-{number}"
        result = run_in(
            pytest_args=rerun_selection(work, node_ids),
            collect_only=False,
            timeout_s=timeout_s,
            env=suite_env(work),
            out_dir=out_dir,
            **({"engine": engine_of(number)} if many else {}),
        )
        log = result.out_dir / "output.log"
        run.published.append(log)
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-30:]) if log.is_file() else ""
        if result.timed_out:
            raise TestRunError(f"{name}: the re-run in the image timed out after {timeout_s:.0f} s")
        usable(result.returncode, tail, result.out_dir / "junit.xml")
        return parse_junit(result.out_dir / "junit.xml", name, run.runner_name)

    why_not = "no test file of its classname in the checkout the image's tests came from (a collection error)"
    if not many:
        return Rerunner(address, run_round, why_not=why_not)
    assert engines is not None
    suite_host = None if suite_engine is None else engines[suite_engine] or "DOCKER_HOST"
    return Rerunner(address, run_round, why_not=why_not, host_of=host_of, suite_host=suite_host)


def command_in_image(work: StageWork, argv: list[str], output: str, timeout_s: float) -> Path:
    """`argv` in the night's image; its output file comes back from the run's out folder."""
    _record_devices(work)
    return image_command(work, argv, output, timeout_s, functools.partial(run_in_image, work))


def image_command(work: StageWork, argv: list[str], output: str, timeout_s: float, run_in: RunIn) -> Path:
    """`argv` by `run_in` ("python": the image's, "{output}": the file it writes, which comes back)."""
    from nightly_assets.containers.runner import OUT_DIR

    python = work.env.python
    inside = f"{OUT_DIR}/{output}"
    program = [python if a == "python" else str(a).replace("{output}", inside) for a in argv]
    result = run_in(program=program, timeout_s=timeout_s)
    if result.returncode != 0:
        log = result.out_dir / "output.log"
        shown = log.read_text(errors="replace")[-3000:] if log.is_file() else "(no output came back)"
        raise CommandError(f"{argv[0]} exited {result.returncode} in the image on '{work.label}':\n{shown}")
    return result.out_dir / output


def run_in_image(
    work: StageWork,
    *,
    pytest_args: list[str] | None = None,
    collect_only: bool = False,
    program: list[str] | None = None,
    timeout_s: float,
    env: dict[str, str] | None = None,
    out_dir: Path | None = None,
    on_stop: Callable[[Callable[[], None]], None] | None = None,
    engine: int = 0,
) -> SuiteRun:
    """Run a pytest suite (or `program`) in the upstream image; outputs land in `out_dir`
    (default run.workdir/out); `on_stop` is told how to kill its container (a shard's); `engine`:
    which of the label's engines (a shard's place among them)."""
    from nightly_assets.containers.runner import RunnerPipesClient, program_command, suite_command

    context, environment, label = work.context, work.env, work.label
    pool: DockerRunnerPoolResource = work.resources.docker_pool
    client = pool.client(label, engine)
    image = _ensure_image(client, environment, work.resources.registries)
    python, rootdir = environment.python, str(environment.rootdir)
    if program is not None:
        command = program_command(python, rootdir, program, timeout_s)
    else:
        command = suite_command(python, rootdir, pytest_args or [], timeout_s, collect_only)
    engines = pool.host(label).engines()
    where = f"'{label}'" + (f" (engine {engines[engine % len(engines)]})" if len(engines) > 1 else "")
    context.log.info(f"running in {image} on {where}: {' '.join(command[2:])}")
    pipes = RunnerPipesClient(client, timeout_s=timeout_s + 60)
    result = pipes.run_suite(
        context=context,
        image=image,
        command=command,
        out_dir=out_dir or work.run.workdir / "out",
        devices=pool.devices(label),
        env=env or {},
        on_stop=on_stop,
    )
    for message in result.invocation.get_custom_messages() if result.invocation else []:
        context.log.debug(f"pipes: {message}")
    return result


def _ensure_image(
    client: docker.DockerClient, environment: EnvironmentManifest, registries: ContainerRegistriesResource
) -> str:
    """The image by local tag when this engine built it, else pulled from its primary registry."""
    import docker.errors

    from nightly_assets.containers.engine import pull_image

    for reference in (environment.local_tag, environment.reference):
        try:
            client.images.get(reference)
            return str(reference)
        except docker.errors.ImageNotFound:
            continue
    reference = str(environment.reference)
    role = environment.primary_registry
    if role is None or not pull_image(client, reference, registries.engine_auth(role)):
        raise ImageNotAvailable(f"image {reference} is not on this engine and no registry serves it")
    return str(reference)


BACKEND = DockerBackend()
