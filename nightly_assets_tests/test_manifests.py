"""What a stage reads of an upstream stage's manifest is typed: a manifest without it is refused
naming the night, the stage and the field, before any work starts."""

import datetime as dt

import pytest

from nightly_assets.artefacts.resources import ArtefactStoreResource, ManifestError, MissingArtefactError
from nightly_assets.manifests import EnvironmentManifest, SourcesManifest, WheelsManifest
from nightly_assets.results import NightKey

KEY = NightKey("demo", dt.date(2026, 11, 23), "cpu")


@pytest.fixture
def artefacts(tmp_path):
    return ArtefactStoreResource(root=str(tmp_path))


def test_a_manifest_is_read_as_its_model_and_keeps_what_the_model_does_not_name(artefacts):
    artefacts.write_manifest(KEY, "wheels", {"wheels": ["/w/a.whl"], "builder": {"kind": "pip"}})
    wheels = artefacts.manifest(KEY, "wheels", WheelsManifest)
    assert wheels.wheels == ["/w/a.whl"] and wheels.sdists == []
    assert wheels.model_extra == {"builder": {"kind": "pip"}}


def test_a_manifest_without_what_the_stage_reads_names_stage_night_and_field(artefacts):
    artefacts.write_manifest(
        KEY, "sources", {"repos": {"nightlysample": {"url": "sample:x", "branch": "main"}}}
    )
    with pytest.raises(ManifestError) as error:
        artefacts.manifest(KEY, "sources", SourcesManifest)
    message = str(error.value)
    assert message.startswith(
        "demo/2026-11-23/cpu: stage 'sources' left a manifest without what this stage reads"
    )
    assert "repos.nightlysample.sha: Field required" in message
    assert "repos.nightlysample.path: Field required" in message
    assert message.endswith("materialize demo/sources for this partition again")


def test_an_image_environment_must_name_its_image(artefacts):
    artefacts.write_manifest(KEY, "image", {"mode": "image", "python": "python3", "rootdir": "/work"})
    with pytest.raises(
        ManifestError, match="an image environment names its rootdir, local_tag and reference"
    ):
        artefacts.manifest(KEY, "image", EnvironmentManifest)
    artefacts.write_manifest(KEY, "venv", {"mode": "venv", "python": "/v/bin/python"})
    assert artefacts.manifest(KEY, "venv", EnvironmentManifest).python == "/v/bin/python"


def test_a_stage_that_never_ran_is_told_apart_from_a_bad_manifest(artefacts):
    with pytest.raises(MissingArtefactError, match="stage 'wheels' has no artefacts") as error:
        artefacts.manifest(KEY, "wheels", WheelsManifest)
    assert not isinstance(error.value, ManifestError)
