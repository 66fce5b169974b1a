"""The GCS peer: PyPI's gcp-storage-emulator on loopback, which google-cloud-storage (and so
dagster-gcp's GCSResource) talks to when STORAGE_EMULATOR_HOST names it."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from nightly_assets_tests.peers.process import free_port, stop_process

BUCKET = "nightly-artefacts"


@dataclass(frozen=True)
class GcsEmulator:
    url: str
    bucket: str

    def object_url(self, name: str) -> str:
        """Where the emulator serves an object, as storage.googleapis.com/{bucket}/{object} does."""
        return f"{self.url}/{self.bucket}/{name}"


def start_emulator(data_dir: Path) -> tuple[subprocess.Popen[bytes], GcsEmulator]:
    binary = shutil.which("gcp-storage-emulator") or str(Path(sys.executable).parent / "gcp-storage-emulator")
    if not Path(binary).exists():
        pytest.fail("gcp-storage-emulator is not installed: `pip install -e .[dev]` (or deselect -m gcs)")
    port = free_port()
    log = (data_dir / "emulator.log").open("wb")
    process = subprocess.Popen(
        [
            binary,
            "start",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--default-bucket",
            BUCKET,
            "--in-memory",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=data_dir,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(
                f"gcp-storage-emulator exited {process.returncode}: {(data_dir / 'emulator.log').read_text()}"
            )
        try:
            with urllib.request.urlopen(f"{url}/", timeout=1):  # noqa: S310 - loopback http
                return process, GcsEmulator(url, BUCKET)
        except OSError:
            time.sleep(0.2)
    stop_process(process, 5)
    pytest.fail(f"gcp-storage-emulator did not answer on {url} within 30 s")


@pytest.fixture(scope="session")
def gcs_peer(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GcsEmulator]:
    process, emulator = start_emulator(tmp_path_factory.mktemp("gcs"))
    try:
        yield emulator
    finally:
        stop_process(process, 5)


@pytest.fixture
def gcs(gcs_peer: GcsEmulator, monkeypatch: pytest.MonkeyPatch) -> GcsEmulator:
    """The emulator, named to google-cloud-storage and to the artefact store's settings."""
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", gcs_peer.url)
    monkeypatch.setenv("NO_GCE_CHECK", "True")
    monkeypatch.setenv("NIGHTLY_GCP_PROJECT", "nightly-test")
    monkeypatch.setenv("NIGHTLY_ARTEFACTS_BUCKET", gcs_peer.bucket)
    monkeypatch.setenv("NIGHTLY_ARTEFACTS_URL", gcs_peer.url)
    monkeypatch.setenv("NIGHTLY_ARTEFACTS_BROWSE_URL", gcs_peer.url)
    return gcs_peer
