"""The Slurm peer: a real one-node cluster on this machine (Debian's slurm-wlm and munge).

A private munged (its own key and socket), then slurmctld and slurmd in the foreground as children
of the test run, with a slurm.conf of their own on free loopback ports: no accounting daemon,
finished jobs are kept by `scontrol show job` (MinJobAge) and in a jobcomp text file. Started once
per session by the `slurm_cluster` fixture; `restart_controller()` is what a slurmctld failover or
upgrade looks like from a client.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from nightly_assets_tests.peers.process import free_port, stop_process

SBIN = Path("/usr/sbin")
START_TIMEOUT_S = 30.0
INSTALL = "apt-get install -y slurm-wlm munge"
# Jobs a test module leaves running across its tests on purpose (a walltime probe): not counted in
# queue(), not cancelled between tests.
BACKGROUND = "background-"


@dataclass
class SlurmCluster:
    root: Path
    conf: Path
    munge_socket: Path
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    def env(self) -> dict[str, str]:
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def run(self, *argv: str) -> str:
        """A Slurm client command against this cluster; its stdout (raises on failure)."""
        done = subprocess.run(argv, env=self.env(), capture_output=True, text=True, timeout=60, check=False)
        if done.returncode != 0:
            raise AssertionError(f"{' '.join(argv)} exited {done.returncode}: {done.stderr}")
        return done.stdout

    def queue(self) -> list[str]:
        """Ids of the jobs queued or running (but the background ones)."""
        listed = self.run("squeue", "--noheader", "--format=%i|%j").split()
        return [job.split("|")[0] for job in listed if not job.split("|")[1].startswith(BACKGROUND)]

    def cancel_all(self) -> None:
        for job_id in self.queue():
            subprocess.run(["scancel", job_id], env=self.env(), check=False, timeout=60)

    def start_controller(self) -> None:
        self._start("slurmctld", [str(SBIN / "slurmctld"), "-D", "-f", str(self.conf)])

    def stop_controller(self) -> None:
        stop_process(self.processes.pop("slurmctld"), grace_s=10)

    def restart_controller(self) -> None:
        self.stop_controller()
        self.start_controller()
        self.wait_until_idle_or_busy()

    def wait_until_idle_or_busy(self) -> None:
        """Until the controller answers and the node takes jobs."""
        deadline = time.monotonic() + START_TIMEOUT_S
        last = ""
        while time.monotonic() < deadline:
            for name, process in self.processes.items():
                if process.poll() is not None:
                    pytest.fail(f"{name} exited with {process.returncode}:\n{self.logs()}")
            done = subprocess.run(
                ["sinfo", "--noheader", "--format=%T"], env=self.env(), capture_output=True, text=True
            )
            last = done.stdout.strip() + done.stderr.strip()
            if done.returncode == 0 and last.rstrip("*") in ("idle", "mixed", "allocated"):
                return
            time.sleep(0.2)
        pytest.fail(f"the Slurm node is not ready within {START_TIMEOUT_S} s (sinfo: {last}):\n{self.logs()}")

    def logs(self) -> str:
        return "\n".join(
            f"--- {log.name} ---\n{log.read_text(errors='replace')[-1500:]}"
            for log in sorted((self.root / "log").glob("*"))
        )

    def _start(self, name: str, argv: list[str]) -> None:
        log = (self.root / "log" / f"{name}.out").open("ab")
        self.processes[name] = subprocess.Popen(argv, stdout=log, stderr=log, env=self.env())

    def stop(self) -> None:
        for process in reversed(list(self.processes.values())):
            stop_process(process, grace_s=10)
        subprocess.run(
            [str(SBIN / "munged"), "--stop", f"--socket={self.munge_socket}"],
            check=False,
            capture_output=True,
            timeout=30,
        )


def _conf(root: Path, munge_socket: Path) -> str:
    # More CPUs than the machine has (config_overrides: slurmd believes the file): the jobs of the
    # tests mostly sleep, and a two-rank job must not wait behind a background one on a 2-core CI.
    cpus = max(8, os.cpu_count() or 1)
    return "\n".join(
        [
            "ClusterName=nightly",
            "SlurmctldHost=localhost",
            f"SlurmctldPort={free_port()}",
            f"SlurmdPort={free_port()}",
            "SlurmUser=root",
            "AuthType=auth/munge",
            f"AuthInfo=socket={munge_socket}",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "SlurmdParameters=config_overrides",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none",
            "JobCompType=jobcomp/filetxt",
            f"JobCompLoc={root / 'log' / 'jobcomp.txt'}",
            # A cancelled or timed-out job is killed 2 s after SIGTERM (default 30 s).
            "KillWait=2",
            "MessageTimeout=3",  # a client gives up on a silent controller after 3 s (default 10)
            "MinJobAge=3600",  # scontrol keeps a finished job for an hour: the tests read it late
            f"StateSaveLocation={root / 'state'}",
            f"SlurmdSpoolDir={root / 'spool'}",
            f"SlurmctldPidFile={root / 'slurmctld.pid'}",
            f"SlurmdPidFile={root / 'slurmd.pid'}",
            f"SlurmctldLogFile={root / 'log' / 'slurmctld.log'}",
            f"SlurmdLogFile={root / 'log' / 'slurmd.log'}",
            f"NodeName=localhost NodeAddr=127.0.0.1 CPUs={cpus} State=UNKNOWN",
            "PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP",
            "",
        ]
    )


def start_slurm(root: Path) -> SlurmCluster:
    missing = [p for p in ("munged", "slurmctld", "slurmd") if not (SBIN / p).exists()]
    if missing or not shutil.which("sbatch"):
        pytest.fail(f"Slurm is not installed ({', '.join(missing) or 'sbatch'} missing): {INSTALL}")
    if os.geteuid() != 0:
        pytest.fail("the Slurm peer runs slurmd, which needs root")
    for sub in ("state", "spool", "log", "munge"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    (root / "munge").chmod(0o755)
    key = root / "munge" / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    munge_socket = root / "munge" / "munge.sock"
    conf = root / "slurm.conf"
    conf.write_text(_conf(root, munge_socket))
    cluster = SlurmCluster(root, conf, munge_socket)
    munged = subprocess.run(
        [
            str(SBIN / "munged"),
            "--force",
            f"--socket={munge_socket}",
            f"--key-file={key}",
            f"--log-file={root / 'log' / 'munged.log'}",
            f"--pid-file={root / 'munge' / 'munged.pid'}",
            f"--seed-file={root / 'munge' / 'munged.seed'}",
        ],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    if munged.returncode != 0:
        pytest.fail(f"munged did not start: {munged.stderr}")
    cluster.start_controller()
    cluster._start("slurmd", [str(SBIN / "slurmd"), "-D", "-N", "localhost", "-f", str(conf)])
    cluster.wait_until_idle_or_busy()
    return cluster


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    """A one-node Slurm cluster (munged, slurmctld, slurmd) for the session; stopped at the end."""
    cluster = start_slurm(tmp_path_factory.mktemp("slurm"))
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def slurm(slurm_cluster: SlurmCluster) -> Iterator[SlurmCluster]:
    """The session's cluster with no job of a test outliving it."""
    yield slurm_cluster
    slurm_cluster.cancel_all()
