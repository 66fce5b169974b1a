"""One image stage for one partition: context, build with cache, push, mirror, retention.

Kept beside the asset so the asset reads as the stage's outline and this as its protocol.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import dagster as dg
import docker  # type: ignore[import-untyped]
import docker.errors  # type: ignore[import-untyped]
import requests

from nightly_assets.builds.distributions import distribution_metadata, distribution_versions
from nightly_assets.builds.framework_stack import LIST_DISTRIBUTIONS, framework_versions
from nightly_assets.builds.resources import PythonBuildResource
from nightly_assets.builds.suite_dependencies import SuiteDependencies
from nightly_assets.containers import recipes
from nightly_assets.containers.engine import BuildResult, build_image, pull_image, push_image
from nightly_assets.containers.registry_images import RetentionResult, copy_image, expire_run_tags
from nightly_assets.containers.resources import ContainerRegistriesResource, DockerRunnerPoolResource
from nightly_assets.manifests import EnvironmentManifest
from nightly_assets.stages import StageRun, StageSpec

if TYPE_CHECKING:  # the stage kind builds this class
    from nightly_assets.containers.image_params import DockerImageParams

NIGHT_LABEL = "nightly.night"
RUN_ID_CHARS = 8  # the short run id the Dagster UI shows


FRAMEWORK_LISTING_TIMEOUT_S = 120  # a cold container start on a busy engine, with room to spare


@dataclass
class ImageOutcome:
    digest: str
    manifest: dict[str, Any]
    metadata: dict[str, Any]
    detail: str
    published: dict[str, list[str]] = field(default_factory=dict)  # role -> references


@dataclass
class ImageStage:
    spec: StageSpec
    params: DockerImageParams
    run: StageRun
    label: str
    pool: DockerRunnerPoolResource
    registries: ContainerRegistriesResource
    log: Any
    run_id: str
    builder: PythonBuildResource
    tests: SuiteDependencies = field(default_factory=SuiteDependencies)

    def _fetch(self, requirements: list[str], dest: Path) -> None:
        self.log.info(f"fetching test dependencies from {self.builder.package_sources()}")
        self.builder.download(requirements, dest, self.run.workdir / "testdeps.log")

    def template_vars(self) -> dict[str, str]:
        target = self.run.target
        return {
            **{k: str(v) for k, v in target.params.items()},
            "arch": target.arch,
            "target": target.name,
            "night": self.run.key.night.isoformat(),
            "run_id": self.run_id[:RUN_ID_CHARS],
        }

    def tags(self) -> list[str]:
        return [t.format(**self.template_vars()) for t in self.params.tag_templates()]

    def build_and_publish(
        self, repo_root: Path, sha: str, wheels: list[Path], base: EnvironmentManifest | None
    ) -> ImageOutcome:
        client = self.pool.client(self.label)
        platform = self.pool.platform_for(self.label, self.run.target.arch)
        local_repo = f"nightly/{self.spec.pipeline.name}-{self.spec.stage.name}".replace("_", "-")
        target = self.run.target.name
        local_tags = [f"{local_repo}:{target}-{self.run.key.night.isoformat()}", f"{local_repo}:{target}"]
        context, cache_from = self._context(client, repo_root, sha, wheels, base, local_tags[1])
        self.log.info(f"building {local_tags[0]} for {platform} on '{self.label}' (cache from {cache_from})")
        built = build_image(
            client,
            context.path,
            local_tags,
            build_args=context.build_args,
            cache_from=cache_from,
            platform=platform,
            log_path=self.run.workdir / "build.log",
            timeout_s=self.pool.build_timeout_s,
            dockerfile=context.dockerfile,
        )
        self.log.info(
            f"built {built.image_id[:19]} in {built.duration_s:.1f} s, "
            f"{built.cached_steps}/{built.steps} steps from cache"
        )
        frameworks, distributions, unread = self._frameworks_in(client, built.image_id, platform, wheels)
        published, digest, attempts = self._publish(client, built)
        retention = self._retention() if published else {}
        primary = next(iter(published), None)  # the first push_to role: where runners pull from
        reference = published[primary][0] if primary else local_tags[0]
        manifest = {
            "mode": "image",
            "image_id": built.image_id,
            "local_tag": local_tags[0],
            "reference": reference,
            "digest": digest,
            "published": published,
            "primary_registry": primary,
            "python": self.params.python,
            "rootdir": recipes.WORKDIR,
            "frameworks": frameworks,
            "distributions": distributions,
            **({"frameworks_unread": unread} if unread else {}),
            "build": {
                "duration_s": round(built.duration_s, 3),
                "steps": built.steps,
                "cached_steps": built.cached_steps,
                "size_bytes": built.size_bytes,
                "architecture": built.architecture,
            },
        }
        metadata: dict[str, Any] = {
            "image_id": built.image_id,
            "digest": digest or "(not pushed)",
            "reference": reference,
            "build_duration_s": dg.MetadataValue.float(round(built.duration_s, 3)),
            "cache_hit_share": dg.MetadataValue.float(round(built.cache_hit_share, 3)),
            "cached_steps": f"{built.cached_steps}/{built.steps}",
            "size_mb": dg.MetadataValue.float(round(built.size_bytes / 1e6, 1)),
            "architecture": built.architecture,
            "push_attempts": attempts,
            "cache_from": ", ".join(cache_from) or "none",
            "frameworks": ", ".join(f"{n} {v}" for n, v in frameworks.items()) or "none",
            **(distribution_metadata(distributions) if distributions else {}),
        }
        if published:
            metadata["published"] = dg.MetadataValue.md(
                "\n".join(
                    f"- **{role}**: " + ", ".join(f"`{r}`" for r in refs) for role, refs in published.items()
                )
            )
        for role, result in retention.items():
            metadata[f"retention/{role}"] = ", ".join(result.deleted_tags) or "nothing expired"
        detail = f"{built.cached_steps}/{built.steps} cached, {built.duration_s:.0f} s" + (
            f", pushed to {', '.join(published)}" if published else ""
        )
        return ImageOutcome(digest or built.image_id, manifest, metadata, detail, published)

    def _frameworks_in(
        self, client: docker.DockerClient, image_id: str, platform: str, wheels: list[Path]
    ) -> tuple[dict[str, str], dict[str, str], str | None]:
        """The framework builds the image's Python imports (torch, jax, the CUDA/ROCm wheels) and
        every distribution's version, read by metadata in a throwaway container with no network.
        An image this engine cannot run (an arm64 image on an amd64 host) or without that Python
        records none, and why."""
        container = None
        try:
            container = client.containers.create(
                image_id,
                [self.params.python, "-c", LIST_DISTRIBUTIONS],
                network_disabled=True,
                platform=platform,
            )
            container.start()
            exit_code = container.wait(timeout=FRAMEWORK_LISTING_TIMEOUT_S).get("StatusCode")
            output = container.logs(stdout=True, stderr=True).decode(errors="replace")
            if exit_code != 0:
                raise ValueError(f"{self.params.python} exited with {exit_code}: {output.strip()[-300:]}")
            return framework_versions(output, wheels), distribution_versions(output), None
        except (
            docker.errors.DockerException,
            requests.RequestException,
            ValueError,
            LookupError,  # an empty or cut listing
            OSError,
        ) as exc:
            self.log.warning(f"framework versions not read from {image_id[:19]}: {exc}")
            return {}, {}, str(exc)[:500]
        finally:
            if container is not None:
                try:
                    container.remove(force=True)
                except docker.errors.DockerException as exc:
                    self.log.warning(f"container {container.short_id} not removed: {exc}")

    def _context(
        self,
        client: docker.DockerClient,
        repo_root: Path,
        sha: str,
        wheels: list[Path],
        base: EnvironmentManifest | None,
        local_latest: str,
    ) -> tuple[recipes.BuildContext, list[str]]:
        build_args = dict(self.run.target.build_args)
        arch = self.run.target.arch
        dest = self.run.workdir / "context"
        cache_from = [local_latest] if _exists(client, local_latest) else []
        if self.params.dockerfile is not None:
            return recipes.repository_context(repo_root, self.params.dockerfile, build_args), cache_from
        if self.params.role == "framework":
            for reference in self._published_references():
                if pull_image(client, reference, self._auth_for(reference)):
                    cache_from.append(reference)
            base_image = (self.params.base_image or self.pool.base_image_for(arch)).format(**build_args)
            return recipes.framework_context(dest, base_image, build_args), cache_from
        from_image = self.pool.base_image_for(arch)
        if base is not None:
            from_image = str(base.local_tag)
            if not _exists(client, from_image):
                pull_image(client, str(base.reference), self._auth_for(str(base.reference)))
                from_image = str(base.reference)
        labels = {
            NIGHT_LABEL: self.run.key.night.isoformat(),
            "nightly.pipeline": self.spec.pipeline.name,
            "nightly.target": self.run.target.name,
            "nightly.run_id": self.run_id,
            "org.opencontainers.image.revision": sha,
        }
        context = recipes.runtime_context(
            dest,
            from_image=from_image,
            needs_venv=base is None,
            wheels=wheels,
            repo_root=repo_root,
            test_paths=list(self.params.tests),
            suites=list(self.params.suites),
            labels=labels,
            tests=self.tests,
            fetch=self._fetch,
        )
        return context, cache_from

    @property
    def image_name(self) -> str:
        """The repository name in every registry (before the role's namespace)."""
        return self.params.repository or self.spec.pipeline.name

    def _repository(self, role: str) -> str:
        return self.registries.repository(role, self.image_name)

    def _published_references(self) -> list[str]:
        """Where last night's image of this stage was pushed under its stable tag (the cache)."""
        push_to = self.params.push_to
        if not push_to:
            return []
        stable = [
            t.format(**self.template_vars()) for t in self.params.tag_templates() if "{run_id}" not in t
        ]
        return [self.registries.reference(push_to[0], self.image_name, tag) for tag in stable[:1]]

    def _auth_for(self, reference: str) -> dict[str, str] | None:
        for role in self.registries.roles():
            if reference.startswith(self.registries.host(role) + "/"):
                return self.registries.engine_auth(role)
        return None

    def _publish(
        self, client: docker.DockerClient, built: BuildResult
    ) -> tuple[dict[str, list[str]], str, int]:
        push_to = list(self.params.push_to)
        if not push_to:
            return {}, "", 0
        tags = self.tags()
        primary, mirrors = push_to[0], push_to[1:]
        registry = self.registries.registry(primary)
        repo = self._repository(primary)
        image = client.images.get(built.image_id)
        digest, attempts = "", 0
        for tag in tags:
            image.tag(f"{registry.host}/{repo}", tag)
            pushed = push_image(
                client,
                f"{registry.host}/{repo}:{tag}",
                self.registries.engine_auth(primary),
                retries=self.pool.push_retries,
            )
            digest, attempts = pushed.digest, max(attempts, pushed.attempts)
            client.images.remove(f"{registry.host}/{repo}:{tag}")  # the engine keeps it by id
        missing = registry.missing_blobs(repo, digest)
        if missing:
            raise RuntimeError(f"{primary}: {repo}@{digest} is missing blobs {missing} after the push")
        published = {primary: [f"{registry.host}/{repo}:{t}" for t in tags]}
        self.log.info(f"pushed {repo}@{digest} to {primary} as {', '.join(tags)}")
        for role in mirrors:
            target = self.registries.registry(role)
            copy_image(registry, repo, digest, target, self._repository(role), tags)
            published[role] = [f"{target.host}/{self._repository(role)}:{t}" for t in tags]
            self.log.info(f"mirrored {digest} to {role}")
        return published, digest, attempts

    def _retention(self) -> dict[str, RetentionResult]:
        """Delete this stage's run tags older than the pipeline's retention, in every registry it uses."""
        run_templates = [t for t in self.params.tag_templates() if "{run_id}" in t]
        if not run_templates:
            return {}
        variables = {**self.template_vars(), "run_id": "\0"}
        patterns = [re.escape(t.format(**variables)).replace("\0", "[0-9a-f]+") for t in run_templates]
        # From when each image was built, not its night: a backfilled old night's image stays.
        cutoff = now() - dt.timedelta(days=self.spec.pipeline.retention_days)
        results = {}
        for role in self.params.push_to:
            results[role] = expire_run_tags(
                self.registries.registry(role),
                self._repository(role),
                "|".join(f"(?:{p})" for p in patterns),
                lambda config: _built_at(config) < cutoff,
            )
            if results[role].deleted_tags:
                self.log.info(f"{role}: retention deleted {', '.join(results[role].deleted_tags)}")
        return results


def now() -> dt.datetime:
    """The clock retention reads (a test moves it forward)."""
    return dt.datetime.now(dt.UTC)


def _built_at(config: dict[str, Any]) -> dt.datetime:
    """When the image was built (its config's `created`; each build is new: its labels name the
    run); an image without one is never taken for expired."""
    created = config.get("created", "")
    if not created:
        return dt.datetime.max.replace(tzinfo=dt.UTC)
    return dt.datetime.fromisoformat(created.replace("Z", "+00:00"))


def _exists(client: docker.DockerClient, reference: str) -> bool:
    try:
        client.images.get(reference)
    except docker.errors.ImageNotFound:
        return False
    return True
