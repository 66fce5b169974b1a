"""Stopping a peer's server process: SIGTERM, a grace period, then SIGKILL."""

from __future__ import annotations

import signal
import subprocess


def stop_process(process: subprocess.Popen[bytes], grace_s: float) -> None:
    if process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=10)
