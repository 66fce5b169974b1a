"""Device detection: the platform the night expects, and exactly NIGHTLY_EXPECTED_DEVICES devices."""

import pytest

pytestmark = pytest.mark.integration


def test_platform_matches_expectation(backend, settings) -> None:
    raw = backend.platform_name()  # jax: default_backend(); torch: cuda/rocm when torch.cuda.is_available()
    if settings.platform == "auto":
        assert backend.platform() in ("cpu", "gpu"), f"unexpected platform {raw!r}: {backend.describe()}"
    else:
        assert backend.platform() == settings.platform, (
            f"NIGHTLY_PLATFORM={settings.platform} but {settings.framework} runs on {raw!r}: "
            f"{backend.describe()}"
        )


def test_device_count(backend, settings) -> None:
    found = backend.device_count()
    assert found == settings.expected_devices, (
        f"NIGHTLY_EXPECTED_DEVICES={settings.expected_devices} but {settings.framework} "
        f"found {found} {backend.platform_name()} device(s): {backend.describe()}"
    )


def test_every_device_holds_data(backend) -> None:
    for i, device in enumerate(backend.devices()):
        x = backend.put([float(i), 1.0], device=i)
        assert backend.device_of(x) == device
        assert backend.to_host(x + 1) == [i + 1.0, 2.0], f"arithmetic on {device}"
