"""Handing specific GPUs to one suite at a time, across processes (Dagster's multiprocess executor
runs each step in a process of its own): one flock'ed file per device in a shared folder.

The kernel drops a flock when its holder's file is closed, so a lease ends with the `with` block or
with the process, however it dies; nothing is ever left to clean up. The lock file holds the
holder's description, read by waiters to say who has the cards. (A process forked while holding
shares the lock until it exits too; a fork that execs does not, the descriptor being close-on-exec.)"""

from __future__ import annotations

import fcntl
import os
import re
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

from nightly_assets.devices.gpus import Gpu, HostGpus

_LOG_EVERY_S = 60.0


class GpuLeaseTimeout(TimeoutError):
    """The devices asked for did not come free in time; says how many, of which, and who holds them."""


class GpuLeases:
    def __init__(self, lock_dir: Path) -> None:
        self.lock_dir = lock_dir

    @contextmanager
    def hold(
        self,
        host: HostGpus,
        count: int,
        *,
        owner: str,
        timeout_s: float,
        poll_s: float = 2.0,
        log: Callable[[str], None] | None = None,
    ) -> Iterator[list[str]]:
        """`count` devices of `host` (their ids) for the block, waiting up to `timeout_s` for them.
        All or none are taken at a time, so two waiters never hold half of what each needs."""
        if count < 0 or count > host.count:
            raise ValueError(
                f"cannot hold {count} GPUs: this host offers {host.count} {host.vendor} devices {host.ids()}"
            )
        if count == 0:
            yield []
            return
        self.lock_dir.mkdir(parents=True, exist_ok=True)
        deadline = time.monotonic() + timeout_s
        next_log = time.monotonic()
        while (taken := self._take(host, count, owner)) is None:
            now = time.monotonic()
            if now >= deadline:
                raise GpuLeaseTimeout(
                    f"{count} of {host.count} {host.vendor} GPUs {host.ids()} did not come free in "
                    f"{timeout_s:g} s for {owner}; held by: {self._holders(host)}"
                )
            if log is not None and now >= next_log:
                wanted = f"{count} of {host.count} GPUs {host.ids()}"
                log(f"{owner} waits for {wanted}; held by: {self._holders(host)}")
                next_log = now + _LOG_EVERY_S
            time.sleep(max(0.0, min(poll_s, deadline - now)))
        try:
            yield [gpu.id for gpu, _ in taken]
        finally:
            for _, fd in taken:
                os.ftruncate(fd, 0)  # a released card shows no holder
                os.close(fd)  # closing drops the flock

    def lock_path(self, host: HostGpus, gpu: Gpu) -> Path:
        """The device's lock file: by UUID, which names the card whatever index a process sees it
        at (a container's nvidia-smi counts its own cards from 0)."""
        safe = re.sub(r"[^A-Za-z0-9._-]", "_", gpu.uuid or gpu.id)
        return self.lock_dir / f"{host.vendor}-{safe}.lock"

    def _take(self, host: HostGpus, count: int, owner: str) -> list[tuple[Gpu, int]] | None:
        taken: list[tuple[Gpu, int]] = []
        for gpu in host.gpus:
            fd = os.open(self.lock_path(host, gpu), os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            os.ftruncate(fd, 0)
            since = datetime.now(UTC).isoformat(timespec="seconds")
            os.pwrite(fd, f"{owner} (pid {os.getpid()}, since {since})\n".encode(), 0)
            taken.append((gpu, fd))
            if len(taken) == count:
                return taken
        for _, fd in taken:  # too few free: hold none while waiting
            os.ftruncate(fd, 0)
            os.close(fd)
        return None

    def _holders(self, host: HostGpus) -> str:
        held = []
        for gpu in host.gpus:
            try:
                holder = self.lock_path(host, gpu).read_text().strip()
            except OSError:
                holder = ""
            if holder:
                held.append(f"{gpu.id}: {holder}")
        return "; ".join(held) or "no one named (the holders wrote no name yet)"
