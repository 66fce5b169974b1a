"""The OCI registry client's errors: they name the registry and what to fix, never a secret."""

import pytest

from nightly_assets.containers.registry import OciRegistry, RegistryError
from nightly_assets.containers.resources import ContainerRegistriesResource, RegistryEndpoint
from nightly_assets_tests.peers.ecr_api import FakeEcrApi


def test_an_unreachable_registry_is_named_after_its_retries():
    sleeps: list[float] = []
    registry = OciRegistry("ecr", "https://127.0.0.1:9", retries=2, backoff_s=0.1, sleep=sleeps.append)
    with pytest.raises(RegistryError, match=r"ecr: GET https://127.0.0.1:9/v2/: registry unreachable"):
        registry.ping()
    assert sleeps == [0.1, 0.2]  # exponential backoff between the attempts


def test_an_unconfigured_role_says_which_variable_to_set():
    with pytest.raises(RegistryError, match=r"role 'acr' is not configured.*NIGHTLY_REGISTRY_ACR_URL"):
        ContainerRegistriesResource().registry("acr")


def test_a_missing_password_variable_is_named(monkeypatch):
    monkeypatch.delenv("NIGHTLY_TEST_NO_SUCH_PASSWORD", raising=False)
    endpoint = RegistryEndpoint(
        url="https://r.example", username="u", password_env="NIGHTLY_TEST_NO_SUCH_PASSWORD"
    )
    with pytest.raises(RegistryError, match="NIGHTLY_TEST_NO_SUCH_PASSWORD is not set"):
        ContainerRegistriesResource(registries={"ecr": endpoint}).registry("ecr")


@pytest.mark.registry
def test_wrong_credentials_get_a_clear_401_without_the_password(registries):
    ecr = registries["ecr"]
    wrong = OciRegistry("ecr", ecr.url, ecr.username, "not-the-password-1234", verify=str(ecr.ca_cert))
    with pytest.raises(RegistryError) as caught:
        wrong.ping()
    assert "401 unauthorized: check the credentials for the 'ecr' registry" in str(caught.value)
    assert "not-the-password-1234" not in str(caught.value)
    right = OciRegistry("ecr", ecr.url, ecr.username, ecr.password, verify=str(ecr.ca_cert))
    right.ping()
    assert right.tags("never/pushed") == []


@pytest.fixture
def ecr_api(registries):
    """The fake ECR API handing out the real ECR-role registry's credentials as its token."""
    ecr = registries["ecr"]
    api = FakeEcrApi(ecr.username, ecr.password, ecr.url).start()
    yield api
    api.stop()


@pytest.fixture
def aws_env(monkeypatch, tmp_path):
    """boto3's credential chain sees only what a test sets: no profile files, no instance metadata."""
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    return monkeypatch


def _ecr_by_token(registries, api: FakeEcrApi) -> ContainerRegistriesResource:
    ecr = registries["ecr"]
    endpoint = RegistryEndpoint(
        url=ecr.url, ca_cert=str(ecr.ca_cert), auth="ecr", aws_region="us-east-1", aws_endpoint_url=api.url
    )
    return ContainerRegistriesResource(registries={"ecr": endpoint})


@pytest.mark.registry
def test_ecr_token_flow_signs_in_to_the_real_registry_and_caches_the_token(registries, ecr_api, aws_env):
    aws_env.setenv("AWS_ACCESS_KEY_ID", "AKIATESTNIGHTLY")
    aws_env.setenv("AWS_SECRET_ACCESS_KEY", "test-secret-key")
    resource = _ecr_by_token(registries, ecr_api)
    registry = resource.registry("ecr")
    registry.ping()
    assert registry.tags("never/pushed") == []
    auth = resource.engine_auth("ecr")
    assert auth is not None and auth["username"] == registries["ecr"].username
    assert auth["serveraddress"] == registry.host
    assert ecr_api.calls == ["AKIATESTNIGHTLY"]  # signed with the chain's key, fetched once, cached


@pytest.mark.registry
def test_ecr_access_denied_is_named(registries, ecr_api, aws_env):
    aws_env.setenv("AWS_ACCESS_KEY_ID", "AKIADENIED")
    aws_env.setenv("AWS_SECRET_ACCESS_KEY", "test-secret-key")
    ecr_api.deny = True
    with pytest.raises(RegistryError, match=r"role 'ecr': ECR in us-east-1 .*AccessDeniedException"):
        _ecr_by_token(registries, ecr_api).registry("ecr")


@pytest.mark.registry
def test_ecr_without_aws_credentials_says_what_to_set(registries, ecr_api, aws_env):
    with pytest.raises(RegistryError, match="no AWS credentials"):
        _ecr_by_token(registries, ecr_api).registry("ecr")
    assert ecr_api.calls == []
