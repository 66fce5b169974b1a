"""The pytest each suite of the night ran with, as its environment's manifest records it (the
environment and docker_image stages' `distributions`), for the night summary."""

from __future__ import annotations

from nightly_assets.artefacts.resources import ArtefactStoreResource, MissingArtefactError
from nightly_assets.catalog.models import Pipeline
from nightly_assets.results import NightKey

ENVIRONMENT_KINDS = ("environment", "docker_image")


def pytest_lines(
    pipeline: Pipeline, key: NightKey, artefacts: ArtefactStoreResource, *, ran: set[str]
) -> list[str]:
    """One line per environment the night's suites ran in: "tests, tests_k (environment): pytest
    8.3.5". `ran`: the stages this run of the night recorded (an older manifest is not tonight's).
    An environment that recorded no pytest (an image this engine could not run) has no line."""
    suites: dict[str, list[str]] = {}
    for suite in pipeline.stages_of("test_suite"):
        upstream = pipeline.upstream(suite.name)
        environment = next((s for s in upstream if pipeline.stage(s).kind in ENVIRONMENT_KINDS), None)
        if environment is not None and environment in ran:
            suites.setdefault(environment, []).append(suite.name)
    lines = []
    for environment, names in suites.items():
        try:
            manifest = artefacts.read_manifest(key, environment)
        except MissingArtefactError:
            continue
        version = (manifest.get("distributions") or {}).get("pytest")
        if version:
            lines.append(f"{', '.join(names)} ({environment}): pytest {version}")
    return lines
