"""Checks on published images: every registry role serves every tag at the same digest."""

from __future__ import annotations

import dagster as dg

from nightly_assets.containers.resources import ContainerRegistriesResource

IMAGE_IN_REGISTRIES = "image_in_registries"


def image_check_specs(key: dg.AssetKey, push_to: list[str]) -> list[dg.AssetCheckSpec]:
    if not push_to:
        return []
    return [
        dg.AssetCheckSpec(
            IMAGE_IN_REGISTRIES,
            asset=key,
            blocking=True,
            description=f"Every tag is in {', '.join(push_to)} and points at the same digest.",
        )
    ]


def image_in_registries(
    key: dg.AssetKey, registries: ContainerRegistriesResource, published: dict[str, list[str]], digest: str
) -> dg.AssetCheckResult:
    """Ask each registry, now, what each published tag points at."""
    from nightly_assets.containers.registry import RegistryError  # requests: for a run only

    problems: list[str] = []
    found: dict[str, str] = {}
    for role, references in published.items():
        registry = registries.registry(role)
        for reference in references:
            repo, _, tag = reference.removeprefix(registry.host + "/").rpartition(":")
            try:
                actual = registry.manifest_digest(repo, tag)
            except RegistryError as exc:
                problems.append(str(exc))
                continue
            found[f"{role}:{tag}"] = actual or "missing"
            if actual != digest:
                problems.append(f"{role} {repo}:{tag} -> {actual or 'missing'} (expected {digest})")
    return dg.AssetCheckResult(
        check_name=IMAGE_IN_REGISTRIES,
        asset_key=key,
        passed=not problems,
        severity=dg.AssetCheckSeverity.ERROR,
        description="; ".join(problems) or f"{digest} in {', '.join(published)}",
        metadata={"digest": digest, "found": dg.MetadataValue.json(found)},
    )


def skipped_registry_checks(key: dg.AssetKey, push_to: list[str]) -> list[dg.AssetCheckResult]:
    """The virtualenv stand-in publishes nothing: say so instead of leaving the check unexecuted."""
    if not push_to:
        return []
    return [
        dg.AssetCheckResult(
            check_name=IMAGE_IN_REGISTRIES,
            asset_key=key,
            passed=False,
            severity=dg.AssetCheckSeverity.WARN,
            description="no image was built (no Docker engine): nothing published",
        )
    ]
