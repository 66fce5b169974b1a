"""The environment stage on a GPU host: a venv made on the host's framework stack (its torch and CUDA
wheels reused) against a fresh venv that installs the same packages, in one run.

The framework is a stand-in of real proportions, scaled down: a `torch` wheel and three CUDA
runtime wheels holding 256 MiB of incompressible data in all (a torch+CUDA install is 3-5 GiB), so
the fresh path pays what pip pays for a real stack (unzip, write, RECORD) and the reuse path pays
what it pays with any stack (a venv, one .pth, the night's own wheel). Both install the same night
wheel, a project with `dependencies = ["torch"]`, from the same folder, offline.
"""

from __future__ import annotations

import base64
import hashlib
import os
import statistics
import sys
import tempfile
import time
import zipfile
from pathlib import Path

from nightly_assets.builds.framework_stack import describe_stack
from nightly_assets.builds.resources import PythonBuildResource
from nightly_assets.process import run_command

# name -> MiB of payload: the proportions of torch 2.x's own wheel and its largest CUDA wheels.
FRAMEWORK = {"torch": 128, "nvidia-cublas": 64, "nvidia-cudnn": 48, "triton": 16}
REPEATS = 3
WHEEL_FILE = b"Wheel-Version: 1.0\nGenerator: bench\nRoot-Is-Purelib: true\nTag: py3-none-any\n"


def _wheel(folder: Path, name: str, version: str, files: dict[str, bytes], requires: list[str]) -> Path:
    """A valid wheel (METADATA, WHEEL, RECORD with hashes), as a build backend writes one."""
    module = name.replace("-", "_")
    dist_info = f"{module}-{version}.dist-info"
    meta = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n" + "".join(
        f"Requires-Dist: {r}\n" for r in requires
    )
    entries = {
        **{f"{module}/{path}": data for path, data in files.items()},
        f"{dist_info}/METADATA": meta.encode(),
        f"{dist_info}/WHEEL": WHEEL_FILE,
    }
    record = [
        f"{path},sha256={base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b'=').decode()},{len(data)}"
        for path, data in entries.items()
    ]
    entries[f"{dist_info}/RECORD"] = ("\n".join([*record, f"{dist_info}/RECORD,,"]) + "\n").encode()
    path = folder / f"{module}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for entry, data in entries.items():
            archive.writestr(entry, data)
    return path


def _framework_wheels(folder: Path) -> list[Path]:
    wheels = []
    for name, mib in FRAMEWORK.items():
        # 8 MiB "shared libraries" of random bytes: as incompressible as real kernels' binaries.
        files = {f"lib/lib{name.replace('-', '_')}_{i}.so": os.urandom(8 * 2**20) for i in range(mib // 8)}
        files["__init__.py"] = b"__version__ = '2.11.0'\n"
        requires = [n for n in FRAMEWORK if n != "torch"] if name == "torch" else []  # as torch's own
        wheels.append(_wheel(folder, name, "2.11.0", files, requires))
    return wheels


def main() -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="bench-env-reuse-") as tmp:
        root = Path(tmp)
        wheelhouse = root / "wheelhouse"
        wheelhouse.mkdir()
        framework = _framework_wheels(wheelhouse)
        dist = root / "dist"
        dist.mkdir()
        night = _wheel(dist, "nightlygpu", "0.1.0", {"__init__.py": b"import torch\n"}, ["torch"])
        builder = PythonBuildResource(toolchain_dir=str(root / "toolchain"), wheelhouse=str(wheelhouse))
        # The host's stack, installed once (a GPU image ships it): not part of any night.
        stack_dir = root / "stack"
        run_command([sys.executable, "-m", "venv", "--without-pip", stack_dir])
        stack_python = stack_dir / "bin" / "python"
        install: list[str | Path] = [
            sys.executable,
            "-m",
            "pip",
            "--python",
            stack_python,
            "install",
            "--no-index",
            "--quiet",
        ]
        run_command([*install, *framework], timeout_s=900)
        stack = describe_stack(stack_python, "benchmark")
        fresh, reused = [], []
        for i in range(REPEATS):
            # Alternating, so a machine that slows down mid-run weighs on both alike.
            start = time.perf_counter()
            builder.create_environment(root / f"fresh{i}", [night], root / f"fresh{i}.log")
            fresh.append(time.perf_counter() - start)
            start = time.perf_counter()
            builder.create_environment(root / f"reused{i}", [night], root / f"reused{i}.log", stack=stack)
            reused.append(time.perf_counter() - start)
        log = (root / "reused0.log").read_text()
        if "Requirement already satisfied: torch" not in log or "nvidia" in log.split("Installing")[-1]:
            raise RuntimeError(f"the reused environment installed torch again:\n{log[-2000:]}")
    fresh_s, reused_s = statistics.median(fresh), statistics.median(reused)
    print(
        f"environment_reuse: fresh venv {fresh_s:.2f} s, on the framework stack {reused_s:.2f} s "
        f"(median of {REPEATS}; {sum(FRAMEWORK.values())} MiB stand-in framework)"
    )
    return {"environment fresh / reused stack": fresh_s / reused_s}
