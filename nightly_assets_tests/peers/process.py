"""What the peers' servers share: a free loopback port to listen on, and stopping the process
(SIGTERM, a grace period, then SIGKILL)."""

from __future__ import annotations

import signal
import socket
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


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])
