"""Publishing to a real package index: twine checks and uploads a real wheel and sdist to
pypiserver on loopback, pip installs them back; the errors a night can meet (credentials refused,
index down, a file twine refuses, a version already published with other content) name what to
fix and never the password; and torch_spyre's publish_test_index stage goes the same way."""

from __future__ import annotations

import datetime as dt
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import dagster as dg
import pytest

from nightly_assets.definitions import build_definitions
from nightly_assets.release.errors import (
    CredentialsRefused,
    DistributionInvalid,
    IndexUnreachable,
    PublishError,
)
from nightly_assets.release.indexes import PackageIndex
from nightly_assets.release.resources import PackageIndexesResource
from nightly_assets.resources import resources_for
from nightly_assets.results import NightKey
from nightly_assets.settings import env_var_names
from nightly_assets_tests.peers.process import free_port
from nightly_assets_tests.peers.pypiserver import PypiServer, start_pypiserver

GOOD_README = "Tiny\n====\n\nA package the publish tests upload.\n"
# reStructuredText that PyPI would not render: `twine check` fails it, as PyPI's upload would.
BAD_README = "Tiny\n====\n\n.. not-a-directive::\n\nThe README of a broken release.\n"

Dist = tuple[Path, Path]  # the wheel and the sdist


def build_dist(dest: Path, name: str, version: str, *, readme: str = GOOD_README, body: str = "") -> Dist:
    """A real wheel and sdist of a one-module project, built offline by setuptools."""
    src = dest / "src"
    module = name.replace("-", "_")
    (src / "src" / module).mkdir(parents=True)
    (src / "src" / module / "__init__.py").write_text(f'"""{name}."""\n{body}\n')
    (src / "README.rst").write_text(readme)
    (src / "pyproject.toml").write_text(
        "[build-system]\n"
        'requires = ["setuptools>=61"]\n'
        'build-backend = "setuptools.build_meta"\n'
        "[project]\n"
        f'name = "{name}"\n'
        f'version = "{version}"\n'
        'description = "A package the nightly publish tests upload."\n'
        'readme = "README.rst"\n'
        'requires-python = ">=3.9"\n'
    )
    out = dest / "dist"
    subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(src)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (wheel,) = out.glob("*.whl")
    (sdist,) = out.glob("*.tar.gz")
    return wheel, sdist


@pytest.fixture
def dist(tmp_path: Path) -> Callable[..., Dist]:
    """Builds a project in this test's folder: dist(name, version, readme=..., body=...)."""
    count = iter(range(100))

    def build(name: str, version: str, **kwargs: str) -> Dist:
        return build_dist(tmp_path / f"project-{next(count)}", name, version, **kwargs)

    return build


def indexes(server: PypiServer, tmp_path: Path, *, password: str | None = None) -> PackageIndexesResource:
    """The resource with `test` on the server, as resources_for wires it from the variables."""
    index = PackageIndex(
        url=server.url, username=server.username or "anyone", password=password or server.password or "any"
    )
    return PackageIndexesResource(
        local_root=str(tmp_path / "index"), indexes={"test": index}, listing_wait_s="10"
    )


def text_of(folder: Path) -> Iterator[tuple[Path, bytes]]:
    for path in folder.rglob("*"):
        if path.is_file():
            yield path, path.read_bytes()


# -- the resource against pypiserver ----------------------------------------------------------------


@pytest.mark.pypi
def test_a_wheel_and_sdist_are_checked_uploaded_and_installed_back(pypi_index, dist, tmp_path):
    wheel, sdist = dist("nightly-tiny", "0.1.0.dev20261103")
    publication = indexes(pypi_index, tmp_path).publish("test", [wheel, sdist], tmp_path / "work")
    assert publication.uploaded == [wheel.name, sdist.name]
    assert publication.already_there == []
    assert publication.installed == {"nightly-tiny": "0.1.0.dev20261103"}
    assert publication.url == pypi_index.url
    assert publication.project_url() == f"{pypi_index.simple_url}nightly-tiny/"
    assert {wheel.name, sdist.name} <= set(pypi_index.files())
    assert (pypi_index.packages_dir / wheel.name).read_bytes() == wheel.read_bytes()
    logs = {log.name: log.read_text() for log in publication.logs}
    assert "PASSED" in logs["twine-check.log"] and "FAILED" not in logs["twine-check.log"]
    assert f"Uploading {wheel.name}" in logs["twine-upload.log"]
    assert "Successfully installed nightly-tiny-0.1.0.dev20261103" in logs["install-back.log"]
    for path, content in text_of(tmp_path / "work"):
        assert pypi_index.password.encode() not in content, path


@pytest.mark.pypi
def test_a_rerun_of_the_night_finds_its_identical_files_and_does_not_fail(pypi_index, dist, tmp_path):
    files = list(dist("nightly-rerun", "0.2.0.dev20261104"))
    resource = indexes(pypi_index, tmp_path)
    first = resource.publish("test", files, tmp_path / "first")
    again = resource.publish("test", files, tmp_path / "again")
    assert first.uploaded == [f.name for f in files]
    assert again.uploaded == []
    assert again.already_there == [f.name for f in files]
    assert again.installed == {"nightly-rerun": "0.2.0.dev20261104"}
    assert not (tmp_path / "again" / "twine-upload.log").exists()  # nothing sent twice


@pytest.mark.pypi
def test_the_same_version_with_other_content_is_refused_naming_the_file(pypi_index, dist, tmp_path):
    resource = indexes(pypi_index, tmp_path)
    wheel, _ = dist("nightly-changed", "0.3.0")
    resource.publish("test", [wheel], tmp_path / "first")
    other, _ = dist("nightly-changed", "0.3.0", body="CHANGED = True")
    assert other.name == wheel.name and other.read_bytes() != wheel.read_bytes()
    with pytest.raises(PublishError, match=rf"already has {wheel.name} with other content .*new version"):
        resource.publish("test", [other], tmp_path / "second")
    assert (pypi_index.packages_dir / wheel.name).read_bytes() == wheel.read_bytes()


@pytest.mark.pypi
def test_a_refused_password_names_the_variable_never_the_value(pypi_index, dist, tmp_path):
    files = list(dist("nightly-refused", "0.4.0"))
    wrong = "wrong-canary-2f9c1e77"
    with pytest.raises(CredentialsRefused) as raised:
        indexes(pypi_index, tmp_path, password=wrong).publish("test", files, tmp_path / "work")
    message = str(raised.value)
    assert f"index 'test' ({pypi_index.url}) refused the credentials (HTTP 403)" in message
    assert "NIGHTLY_TEST_INDEX_USER / NIGHTLY_TEST_INDEX_PASSWORD" in message
    assert wrong not in message
    for path, content in text_of(tmp_path / "work"):
        assert wrong.encode() not in content, path
    assert not {f.name for f in files} & set(pypi_index.files())


@pytest.mark.pypi
def test_twine_check_failure_names_the_file_and_the_reason_and_uploads_nothing(pypi_index, dist, tmp_path):
    wheel, sdist = dist("nightly-badreadme", "0.5.0", readme=BAD_README)
    with pytest.raises(DistributionInvalid) as raised:
        indexes(pypi_index, tmp_path).publish("test", [wheel, sdist], tmp_path / "work")
    message = str(raised.value)
    assert message.startswith(f"twine check --strict refused {wheel.name}, {sdist.name}: ")
    assert f"{wheel.name}: `long_description` has syntax errors in markup" in message
    assert 'Unknown directive type "not-a-directive"' in message
    assert not {wheel.name, sdist.name} & set(pypi_index.files())


def test_an_unreachable_index_is_named_with_its_url(dist, tmp_path):
    wheel, _ = dist("nightly-nowhere", "0.6.0")
    url = f"http://127.0.0.1:{free_port()}/"  # nothing listens there
    resource = PackageIndexesResource(
        local_root=str(tmp_path / "index"),
        indexes={"test": PackageIndex(url=url, password="pw")},
        http_timeout_s="5",
    )
    with pytest.raises(
        IndexUnreachable, match=rf"index 'test' \({url}\): {url}simple/nightly-nowhere/ does not"
    ):
        resource.publish("test", [wheel], tmp_path / "work")


@pytest.mark.pypi
def test_an_upload_endpoint_that_does_not_answer_is_named(pypi_index, dist, tmp_path):
    """The simple index answers but the upload endpoint (another host on PyPI) does not: twine's
    failure is reported as the index being unreachable, not as its traceback."""
    wheel, _ = dist("nightly-noupload", "0.6.1")
    url = f"http://127.0.0.1:{free_port()}/"
    index = PackageIndex(url=url, simple_url=pypi_index.simple_url, password="pw")
    resource = PackageIndexesResource(local_root=str(tmp_path / "index"), indexes={"test": index})
    with pytest.raises(
        IndexUnreachable, match=rf"index 'test' \({url}\): no answer to the upload: .*Connection"
    ):
        resource.publish("test", [wheel], tmp_path / "work")


@pytest.mark.pypi
def test_an_index_without_auth_serves_a_folder_to_pip(dist, tmp_path):
    """start_pypiserver(folder, auth=False): any credentials upload, and pip installs from it."""
    wheel, sdist = dist("nightly-open", "0.7.0")
    with start_pypiserver(tmp_path / "open", auth=False) as server:
        assert server.password is None
        publication = indexes(server, tmp_path).publish("test", [wheel, sdist], tmp_path / "work")
        assert publication.installed == {"nightly-open": "0.7.0"}
        assert server.files() == sorted([wheel.name, sdist.name])


# -- configuration ----------------------------------------------------------------------------------


def test_a_missing_password_is_named_before_anything_is_sent(dist, tmp_path):
    wheel, _ = dist("nightly-nopass", "0.8.0")
    resource = PackageIndexesResource(
        local_root=str(tmp_path / "index"), indexes={"test": PackageIndex(url="http://127.0.0.1:9/")}
    )
    with pytest.raises(
        PublishError, match="no password or API token to upload with: set NIGHTLY_TEST_INDEX_PASSWORD"
    ):
        resource.publish("test", [wheel], tmp_path / "work")


def test_an_index_url_with_credentials_in_it_is_refused():
    with pytest.raises(ValueError, match="expected a URL without credentials"):
        PackageIndex(url="https://user:secret@upload.example/legacy/")
    with pytest.raises(ValueError, match=r"'upload\.example': expected an http"):
        PackageIndex(url="upload.example")


def _clear_index_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    for prefix in ("NIGHTLY_TEST_INDEX_", "NIGHTLY_PROD_INDEX_"):
        for suffix in ("URL", "SIMPLE_URL", "USER", "PASSWORD"):
            monkeypatch.delenv(prefix + suffix, raising=False)


def test_the_local_default_puts_the_test_index_in_the_folder_and_prod_needs_the_variables(
    tmp_path, monkeypatch
):
    _clear_index_variables(monkeypatch)
    local = resources_for("local", tmp_path)["package_index"]
    assert local.is_local("test") and local.is_local("local")
    assert not local.is_configured("production")
    prod = resources_for("prod", tmp_path)["package_index"]
    assert not prod.is_configured("test") and not prod.is_configured("production")
    assert prod.not_configured("test") == (
        "the package index 'test' is not configured in this deployment (configured: local); set "
        "NIGHTLY_TEST_INDEX_URL (the upload endpoint), NIGHTLY_TEST_INDEX_USER and "
        "NIGHTLY_TEST_INDEX_PASSWORD; NIGHTLY_TEST_INDEX_SIMPLE_URL where pip reads it elsewhere "
        "(default: <url>/simple/)"
    )
    assert "set NIGHTLY_PROD_INDEX_URL" in local.not_configured("production")


def test_the_index_variables_reach_the_resource_by_name(tmp_path, monkeypatch):
    _clear_index_variables(monkeypatch)
    monkeypatch.setenv("NIGHTLY_TEST_INDEX_URL", "https://test.pypi.example/legacy/")
    monkeypatch.setenv("NIGHTLY_TEST_INDEX_SIMPLE_URL", "https://test.pypi.example/simple/")
    monkeypatch.setenv("NIGHTLY_TEST_INDEX_PASSWORD", "pypi-canary-token-81d0")
    for env in ("local", "prod"):
        resource = resources_for(env, tmp_path)["package_index"]  # type: ignore[arg-type]
        assert not resource.is_local("test")
        assert env_var_names(resource) == {
            "NIGHTLY_TEST_INDEX_URL",
            "NIGHTLY_TEST_INDEX_SIMPLE_URL",
            "NIGHTLY_TEST_INDEX_PASSWORD",
        }
        config = resource._convert_to_config_dictionary()
        assert config["indexes"]["test"]["password"] == {"env": "NIGHTLY_TEST_INDEX_PASSWORD"}
        assert "pypi-canary-token-81d0" not in repr(config)
        with dg.build_resources({"package_index": resource}) as resolved:  # what a run reads
            index = resolved.package_index.index("test")
            assert (index.url, index.index_url, index.username, index.password) == (
                "https://test.pypi.example/legacy/",
                "https://test.pypi.example/simple/",
                "__token__",
                "pypi-canary-token-81d0",
            )


# -- torch_spyre's publish_test_index stage ---------------------------------------------------------

SPYRE_NIGHT = NightKey("torch_spyre", dt.date(2026, 11, 3), "pytorch-pinned")
PUBLISH = dg.AssetKey(["torch_spyre", "publish_test_index"])


def publish_stage(
    home: Path, tmp_path: Path, files: Dist, env: str = "local"
) -> tuple[dg.ExecuteInProcessResult, dict]:
    """torch_spyre/publish_test_index of the shipped catalog, materialized on its own for one night
    after the wheels stage left `files`: the local resources as `nightly run` makes them, with the
    package indexes of `env`."""
    resources = resources_for("local", home)
    resources["package_index"] = resources_for(env, home)["package_index"]  # type: ignore[arg-type]
    artefacts = resources["artefacts"]
    folder = artefacts.stage_dir(SPYRE_NIGHT, "wheels") / "dist"
    folder.mkdir()
    copies = [Path(f.replace(folder / f.name)) for f in files]
    artefacts.write_manifest(SPYRE_NIGHT, "wheels", {"wheels": [str(copies[0])], "sdists": [str(copies[1])]})
    (tmp_path / "dagster_home").mkdir(exist_ok=True)
    with dg.instance_for_test(temp_dir=str(tmp_path / "dagster_home")) as instance:
        result = dg.materialize(
            [build_definitions().get_assets_def(PUBLISH)],
            partition_key=f"{SPYRE_NIGHT.night.isoformat()}|{SPYRE_NIGHT.target}",
            resources=resources,
            instance=instance,
            raise_on_error=False,
        )
        run = instance.get_run_by_id(result.run_id)
        assert run is not None
        with dg.build_resources({"warehouse": resources["warehouse"]}) as resolved:  # EnvVars resolved
            stages = {s.stage: s for s in resolved.warehouse.store().stages(SPYRE_NIGHT)}
        return result, {"stage": stages["publish_test_index"], "run_config": repr(run.run_config)}


@pytest.mark.pypi
def test_torch_spyre_publishes_to_the_test_index_and_installs_back(
    pypi_index, dist, nightly_home, tmp_path, monkeypatch
):
    _clear_index_variables(monkeypatch)
    monkeypatch.setenv("NIGHTLY_TEST_INDEX_URL", pypi_index.url)
    monkeypatch.setenv("NIGHTLY_TEST_INDEX_USER", pypi_index.username)
    monkeypatch.setenv("NIGHTLY_TEST_INDEX_PASSWORD", pypi_index.password)
    wheel, sdist = dist("torch-spyre", "0.1.0.dev20261103")
    result, seen = publish_stage(nightly_home, tmp_path, (wheel, sdist))
    assert result.success
    (materialization,) = result.asset_materializations_for_node("torch_spyre__publish_test_index")
    metadata = {k: v.value for k, v in materialization.metadata.items()}
    assert metadata["index_url"] == pypi_index.url
    assert metadata["project_url"] == f"{pypi_index.simple_url}torch-spyre/"
    assert metadata["uploaded"] == [wheel.name, sdist.name]
    assert metadata["installed_back"] == "torch-spyre==0.1.0.dev20261103"
    assert {wheel.name, sdist.name} <= set(pypi_index.files())
    stage = seen["stage"]
    assert stage.status == "success"
    assert stage.detail == (
        f"2 files uploaded to {pypi_index.url}; installed back: torch-spyre==0.1.0.dev20261103"
    )
    # The password reaches twine's environment only: not the run config, the event log, the
    # stage's manifest and logs, nor the warehouse.
    assert pypi_index.password not in seen["run_config"]
    for path, content in text_of(tmp_path):
        assert pypi_index.password.encode() not in content, path


@pytest.mark.pypi
def test_torch_spyre_with_a_refused_password_fails_its_stage_naming_the_variable(
    pypi_index, dist, nightly_home, tmp_path, monkeypatch
):
    _clear_index_variables(monkeypatch)
    wrong = "refused-canary-5d2a90"
    monkeypatch.setenv("NIGHTLY_TEST_INDEX_URL", pypi_index.url)
    monkeypatch.setenv("NIGHTLY_TEST_INDEX_USER", pypi_index.username)
    monkeypatch.setenv("NIGHTLY_TEST_INDEX_PASSWORD", wrong)
    result, seen = publish_stage(nightly_home, tmp_path, dist("torch-spyre", "0.1.0.dev20261104"))
    assert not result.success
    stage = seen["stage"]
    assert stage.status == "failure"
    assert stage.detail.startswith(
        f"CredentialsRefused: index 'test' ({pypi_index.url}) refused the credentials"
    )
    assert "NIGHTLY_TEST_INDEX_PASSWORD" in stage.detail
    for path, content in text_of(tmp_path):
        assert wrong.encode() not in content, path


def test_torch_spyre_on_a_laptop_publishes_to_the_local_folder(dist, nightly_home, tmp_path, monkeypatch):
    _clear_index_variables(monkeypatch)
    wheel, sdist = dist("torch-spyre", "0.1.0.dev20261105")
    result, seen = publish_stage(nightly_home, tmp_path, (wheel, sdist))
    assert result.success
    folder = nightly_home / "index" / "torch_spyre"
    assert sorted(p.name for p in folder.iterdir()) == sorted([wheel.name, sdist.name])
    assert seen["stage"].detail == (
        f"2 files published to the local folder {folder} "
        "(index 'test' is this folder here: NIGHTLY_TEST_INDEX_URL is unset)"
    )


def test_torch_spyre_in_prod_without_the_variables_names_them(dist, nightly_home, tmp_path, monkeypatch):
    _clear_index_variables(monkeypatch)
    result, seen = publish_stage(nightly_home, tmp_path, dist("torch-spyre", "0.1.0.dev20261106"), env="prod")
    assert not result.success
    assert seen["stage"].detail.startswith(
        "StageNotAvailable: torch_spyre/publish_test_index: the package index 'test' is not configured "
        "in this deployment (configured: local); set NIGHTLY_TEST_INDEX_URL"
    )
