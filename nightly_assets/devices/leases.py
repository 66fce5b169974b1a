"""Handing specific GPUs to one suite at a time, across processes (Dagster's multiprocess executor
runs each step in a process of its own): one flock'ed file per device in a shared folder.

The kernel drops a flock when the last descriptor of its open file is closed, so a lease ends with
the `with` block or with the process, however it dies; nothing is ever left to clean up. The
process that uses the cards (the suite's pytest, in a process group of its own) is handed the lock
descriptors too (`Lease.fds`, `pass_fds`): the lease lives as long as the tests, not only as long
as the orchestrator, so a night killed with SIGKILL does not free cards its tests still run on.
The lock file names the holder, read by waiters to say who has the cards, and the process ids of
the holder and its tests: a waiter that finds the holder gone but its tests still running ends
those tests (TERM, then KILL) before it takes their cards."""

from __future__ import annotations

import dataclasses
import fcntl
import json
import os
import re
import signal
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from nightly_assets.devices.gpus import Gpu, HostGpus

_LOG_EVERY_S = 60.0
# A stale holder's tests get this long after SIGTERM to end (pytest writes its report) before SIGKILL.
STALE_TESTS_GRACE_S = 10.0


def process_start(pid: int) -> int | None:
    """The process's start time (clock ticks since boot, /proc/<pid>/stat field 22); None when no
    such process runs. With the pid it names one process, whatever pid the kernel reuses later."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()  # after the command name, which may hold spaces
    return int(fields[19]) if fields[0] != "Z" else None  # a zombie has ended


@dataclass(frozen=True)
class Holder:
    """Who holds a card: the lock file's content."""

    owner: str
    pid: int
    pid_start: int | None
    tests: int | None = None  # the process group of the tests using the card
    tests_start: int | None = None
    since: str = field(default_factory=lambda: datetime.now(UTC).isoformat(timespec="seconds"))

    def text(self) -> str:
        record = {
            "pid": self.pid,
            "pid_start": self.pid_start,
            "tests": self.tests,
            "tests_start": self.tests_start,
        }
        return f"{self.owner} (pid {self.pid}, since {self.since})\n{json.dumps(record)}\n"

    @classmethod
    def read(cls, path: Path) -> Holder | None:
        try:
            first, record = path.read_text().splitlines()[:2]
            fields = json.loads(record)
            owner, rest = first.rsplit(" (pid ", 1)
            return cls(owner, **fields, since=rest.split(", since ", 1)[1].rstrip(")"))
        except (OSError, ValueError, TypeError, IndexError):
            return None  # free, being written, or written by an older version

    def stale_tests(self) -> int | None:
        """The tests' process group when the holder has ended but its tests still run; None when
        it cannot tell (no /proc to read start times from: never end what may be alive)."""
        if self.pid_start is None or self.tests is None or self.tests_start is None:
            return None
        if process_start(self.pid) == self.pid_start:
            return None  # the holder is alive: its lease is its own
        if process_start(self.tests) != self.tests_start:
            return None  # the tests have ended too (or their pid is another process's now)
        return self.tests


@dataclass
class Lease:
    """The cards held (their ids) and the lock descriptors a child must inherit to hold them too."""

    ids: list[str]
    fds: list[int] = field(default_factory=list)
    holder: Holder | None = None

    def tests_started(self, pid: int) -> None:
        """Note the process (a group leader) that now uses the cards, for a later waiter to end if
        this lease's holder dies first."""
        if self.holder is None:
            return
        # Still the holder's own `since`: when the card was taken, not when its tests began.
        self.holder = dataclasses.replace(self.holder, tests=pid, tests_start=process_start(pid))
        for fd in self.fds:
            _rewrite(fd, self.holder.text())


def _rewrite(fd: int, text: str) -> None:
    os.ftruncate(fd, 0)
    os.pwrite(fd, text.encode(), 0)


class GpuLeaseTimeout(TimeoutError):
    """The devices asked for did not come free in time; says how many, of which, and who holds them."""


class GpuLeases:
    def __init__(self, lock_dir: Path) -> None:
        self.lock_dir = lock_dir
        self._ending: dict[int, float] = {}  # stale tests' process group -> when TERM was sent

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
    ) -> Iterator[Lease]:
        """`count` devices of `host` for the block, waiting up to `timeout_s` for them. All or none
        are taken at a time, so two waiters never hold half of what each needs."""
        if count < 0 or count > host.count:
            raise ValueError(
                f"cannot hold {count} GPUs: this host offers {host.count} {host.vendor} devices {host.ids()}"
            )
        if count == 0:
            yield Lease([])
            return
        self.lock_dir.mkdir(parents=True, exist_ok=True)
        deadline = time.monotonic() + timeout_s
        next_log = time.monotonic()
        holder = Holder(owner, os.getpid(), process_start(os.getpid()))
        while (taken := self._take(host, count, holder, log)) is None:
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
            yield Lease([gpu.id for gpu, _ in taken], [fd for _, fd in taken], holder)
        finally:
            for _, fd in taken:
                os.ftruncate(fd, 0)  # a released card shows no holder
                os.close(fd)  # closing drops the flock

    def lock_path(self, host: HostGpus, gpu: Gpu) -> Path:
        """The device's lock file: by UUID, which names the card whatever index a process sees it
        at (a container's nvidia-smi counts its own cards from 0)."""
        safe = re.sub(r"[^A-Za-z0-9._-]", "_", gpu.uuid or gpu.id)
        return self.lock_dir / f"{host.vendor}-{safe}.lock"

    def _take(
        self, host: HostGpus, count: int, holder: Holder, log: Callable[[str], None] | None
    ) -> list[tuple[Gpu, int]] | None:
        taken: list[tuple[Gpu, int]] = []
        for gpu in host.gpus:
            path = self.lock_path(host, gpu)
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                self._end_stale_tests(gpu, path, log)
                continue
            _rewrite(fd, holder.text())
            taken.append((gpu, fd))
            if len(taken) == count:
                return taken
        for _, fd in taken:  # too few free: hold none while waiting
            os.ftruncate(fd, 0)
            os.close(fd)
        return None

    def _end_stale_tests(self, gpu: Gpu, path: Path, log: Callable[[str], None] | None) -> None:
        """A card held by the tests of a holder that has ended (a night killed with SIGKILL, its
        tests left running in their own process group): end them, TERM first, so the card is
        never handed to two tests at once and is not held by tests nobody reads."""
        holder = Holder.read(path)
        group = holder.stale_tests() if holder is not None else None
        if holder is None or group is None:
            return
        news = group not in self._ending
        late = time.monotonic() - self._ending.setdefault(group, time.monotonic()) >= STALE_TESTS_GRACE_S
        try:
            os.killpg(group, signal.SIGKILL if late else signal.SIGTERM)
        except (ProcessLookupError, PermissionError):
            return
        if log is not None and news:
            log(
                f"GPU {gpu.id}: its holder {holder.owner!r} (pid {holder.pid}) has ended but its tests "
                f"(process group {group}) still run on the card: ending them before handing it out"
            )

    def _holders(self, host: HostGpus) -> str:
        held = []
        for gpu in host.gpus:
            try:
                holder = self.lock_path(host, gpu).read_text().strip().splitlines()[0]
            except (OSError, IndexError):
                holder = ""
            if holder:
                held.append(f"{gpu.id}: {holder}")
        return "; ".join(held) or "no one named (the holders wrote no name yet)"
