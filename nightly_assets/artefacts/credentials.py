"""Google Cloud credentials of the GCS artefact store: looked up once per process, and only where
some source of them is configured.

google-auth's `default()` ends its search by probing the GCE metadata server, 3 tries of 3 s where
nothing answers: ~12 s on a host outside Google Cloud, and a new storage client looks them up
again (for its project too). So the store looks them up here, once per process and settings,
and without any request when no source is configured.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import google.auth
from google.auth import environment_vars
from google.auth.exceptions import DefaultCredentialsError

# The variables that decide where credentials come from: a change makes a new lookup.
SOURCE_VARIABLES = (
    "STORAGE_EMULATOR_HOST",
    environment_vars.CREDENTIALS,  # GOOGLE_APPLICATION_CREDENTIALS
    environment_vars.CLOUD_SDK_CONFIG_DIR,  # CLOUDSDK_CONFIG: where gcloud keeps its ADC file
    environment_vars.GCE_METADATA_HOST,
    environment_vars.GCE_METADATA_ROOT,
    environment_vars.GCE_METADATA_IP,
    environment_vars.PROJECT,
)
# On a GCE VM (GKE nodes included) the BIOS says so; google-auth reads the same file.
GCE_PRODUCT_NAME_FILE = Path("/sys/class/dmi/id/product_name")
NONE_CONFIGURED = (
    "no Google Cloud credentials are configured (GOOGLE_APPLICATION_CREDENTIALS, gcloud's application "
    "default credentials, or a GCE/GKE metadata server: GCE_METADATA_HOST where it is not detected)"
)


@dataclass(frozen=True)
class GcpCredentials:
    """What a storage client needs, or why there is none. `credentials` None with no `missing`: the
    storage emulator (google-cloud-storage uses anonymous credentials with it)."""

    credentials: Any = None  # google.auth.credentials.Credentials
    project: str | None = None
    source: str = ""
    missing: str = ""  # why there are none: the store is then local-only


def gcp_credentials(project: str | None) -> GcpCredentials:
    """The credentials of this process (and `project`, else theirs), looked up on first use."""
    return _lookup(project, tuple(os.environ.get(name) for name in SOURCE_VARIABLES))


@functools.cache
def _lookup(project: str | None, environment: tuple[str | None, ...]) -> GcpCredentials:
    """One lookup per project and source settings (the cache counts them)."""
    settings = dict(zip(SOURCE_VARIABLES, environment, strict=True))
    if settings["STORAGE_EMULATOR_HOST"]:
        return GcpCredentials(None, project, f"the storage emulator at {settings['STORAGE_EMULATOR_HOST']}")
    source = configured_source(settings)
    if source is None:
        return GcpCredentials(missing=NONE_CONFIGURED)
    try:
        credentials, found = google.auth.default()
    except DefaultCredentialsError as exc:
        return GcpCredentials(missing=f"{source} gave no credentials: {type(exc).__name__}: {exc}")
    return GcpCredentials(credentials, project or found, source)


def configured_source(settings: dict[str, str | None]) -> str | None:
    """Where google-auth would find credentials without waiting on a metadata server that is not
    there; None when nowhere."""
    if settings[environment_vars.CREDENTIALS]:
        return f"GOOGLE_APPLICATION_CREDENTIALS ({settings[environment_vars.CREDENTIALS]})"
    adc = _gcloud_adc_file(settings[environment_vars.CLOUD_SDK_CONFIG_DIR])
    if adc.is_file():
        return f"gcloud's application default credentials ({adc})"
    for name in (environment_vars.GCE_METADATA_HOST, environment_vars.GCE_METADATA_ROOT):
        if settings[name]:
            return f"the metadata server at {settings[name]} ({name})"
    if settings[environment_vars.GCE_METADATA_IP]:
        return f"the metadata server at {settings[environment_vars.GCE_METADATA_IP]} (GCE_METADATA_IP)"
    if _on_gce():
        return "the GCE metadata server (this host is a Google Compute Engine VM)"
    return None


def _gcloud_adc_file(config_dir: str | None) -> Path:
    if config_dir:
        return Path(config_dir) / "application_default_credentials.json"
    return Path.home() / ".config/gcloud/application_default_credentials.json"


def _on_gce() -> bool:
    try:
        return GCE_PRODUCT_NAME_FILE.read_text().strip().startswith("Google")
    except OSError:
        return False
