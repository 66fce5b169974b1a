"""The OCI registry client's errors: they name the registry and what to fix, never a secret."""

import pytest

from nightly_assets.containers.registry import OciRegistry, RegistryError
from nightly_assets.containers.resources import ContainerRegistriesResource, RegistryEndpoint


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
